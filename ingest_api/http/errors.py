"""Every HTTP error is ``{"error": CODE, "message": ...}`` with a fitting status.

Refusals of the broker core (:class:`broker.errors.BrokerError`) and store faults
(:mod:`store.errors`) carry a stable ``code``; :func:`broker.errors.error_body` gives each its
status and body, in one place. This module registers that mapping with FastAPI.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from broker.errors import BrokerError, error_body
from ingest_api.http.routes import allowed_methods
from store import SparkMQError

log = logging.getLogger(__name__)

#: Generic codes for statuses raised by the framework (404 route, 405 method, ...).
_CODE_BY_STATUS: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    fields = {name: value for name, value in extra.items() if value is not None}
    return JSONResponse({"error": code, "message": message, **fields}, status_code=status, headers=headers)


def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BrokerError)
    status, body, headers = error_body(exc)
    return JSONResponse(body, status_code=status, headers=headers)


def _store_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SparkMQError)
    status, body, headers = error_body(exc)
    if status == 500 or (status > 500 and not exc.retriable):
        log.error("store fault answered with %d: %s", status, exc, exc_info=status == 500)
    elif status > 500:  # a retriable refusal (no master yet, too few in sync): the client retries
        log.info("answered %d (retriable): %s", status, exc)
    return JSONResponse(body, status_code=status, headers=headers)


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
    detail = [
        {"loc": list(err.get("loc", ())), "msg": str(err.get("msg", "")), "type": str(err.get("type", ""))}
        for err in errors
    ]
    return error_response(422, "validation_error", message, detail=detail)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _CODE_BY_STATUS.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        # Starlette lists the methods of the first route whose path matched; a path served by
        # several routes (GET and DELETE /topics/{topic}, ...) allows all of theirs.
        methods = allowed_methods(request.app.routes, request.url.path)
        if methods:
            headers = {**(headers or {}), "Allow": ", ".join(methods)}
    return error_response(exc.status_code, code, str(exc.detail), headers)


def response_for(exc: BrokerError | SparkMQError) -> JSONResponse:
    """The answer the app's exception handlers give for ``exc`` (the fast lane renders its
    errors with this, so they are the same bytes)."""
    handler = _api_error if isinstance(exc, BrokerError) else _store_error
    return handler(None, exc)  # type: ignore[arg-type]


def install_error_handlers(app: FastAPI) -> None:
    """Register the one mapping from exceptions to ``{"error", "message"}`` bodies."""
    app.add_exception_handler(BrokerError, _api_error)
    app.add_exception_handler(SparkMQError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
