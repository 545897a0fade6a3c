"""Every HTTP error is ``{"error": CODE, "message": ...}`` with a fitting status.

Store faults (:mod:`store.errors`) carry a stable ``code``; :data:`STATUS_BY_CODE` maps each to
its HTTP status in one place. Faults of the HTTP layer itself are :class:`ApiError`.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest_api.http.routes import allowed_methods
from store import SparkMQError

log = logging.getLogger(__name__)

#: Store error code -> HTTP status. Codes not listed (unexpected faults) are 500.
STATUS_BY_CODE: dict[str, int] = {
    "invalid_argument": 400,
    "invalid_topic": 400,
    "invalid_group": 400,
    "unknown_topic": 404,
    "unknown_queue": 404,
    "unknown_transaction": 404,
    "unknown_message": 404,
    "unknown_group": 404,
    "producer_group_mismatch": 409,
    "not_a_half_message": 400,
    "message_too_large": 413,
    "store_closed": 503,
    "store_not_writable": 503,
    "flush_timeout": 503,
    "index_behind": 503,
    "store_locked": 503,
    "data_lost": 410,
    "corrupt_store": 500,
    # the cluster layer (cluster.errors)
    "cluster_unavailable": 503,
    "queue_unavailable": 503,
    "no_live_broker": 503,
    "invalid_placement": 409,  # well formed, but not placeable on the cluster as it is
    "invalid_broker_name": 400,
    "broker_name_taken": 409,
    "store_belongs_elsewhere": 409,
    "corrupt_route": 500,
    # replication (store.ha): refusals carry RocketMQ's status in the body
    "not_master": 503,
    "replica_fenced": 503,
    "slave_not_available": 503,
    "flush_slave_timeout": 503,
    "replication_gap": 503,
    "replicated_data_corrupt": 500,
}

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


class ApiError(Exception):
    """A refusal decided by the HTTP layer (bad batch entry, missing token, ...).

    ``extra`` fields are merged into the JSON body (e.g. ``index`` of a bad batch entry).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        #: Extra fields with a value (``None`` values are dropped).
        self.extra = {name: value for name, value in extra.items() if value is not None}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    fields = {name: value for name, value in extra.items() if value is not None}
    return JSONResponse({"error": code, "message": message, **fields}, status_code=status, headers=headers)


def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers, **exc.extra)


def _store_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SparkMQError)
    status = STATUS_BY_CODE.get(exc.code, 500)
    if status == 500 or (status > 500 and not exc.retriable):
        log.error("store fault answered with %d: %s", status, exc, exc_info=status == 500)
    elif status > 500:  # a retriable refusal (no master yet, too few in sync): the client retries
        log.info("answered %d (retriable): %s", status, exc)
    headers = {"Retry-After": "1"} if exc.retriable else None
    broker = getattr(exc, "broker", None)  # a cluster fault names the broker it is about
    return error_response(
        status, exc.code, str(exc) or exc.code, headers, retriable=exc.retriable, broker=broker
    )


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


def response_for(exc: ApiError | SparkMQError) -> JSONResponse:
    """The answer the app's exception handlers give for ``exc`` (the fast lane renders its
    errors with this, so they are the same bytes)."""
    handler = _api_error if isinstance(exc, ApiError) else _store_error
    return handler(None, exc)  # type: ignore[arg-type]


def install_error_handlers(app: FastAPI) -> None:
    """Register the one mapping from exceptions to ``{"error", "message"}`` bodies."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(SparkMQError, _store_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
