"""The OpenAPI document (``/openapi.json``): FastAPI's, completed so that it is the contract.

FastAPI describes the routes' parameters and models. What it cannot know is added here, in
one pass over the generated document, from the routes themselves and the broker's
configuration, so a new route gets the same treatment without extra work:

* **security**: one bearer scheme, ``bearerAuth``. With ``--auth-file`` it is required on
  every operation that reads the token (``PrincipalDep``); without, it is optional
  (``[{}, {"bearerAuth": []}]``). Operations that never read it (``/healthz``) declare none.
* **errors**: every status an operation can answer, each with the one error body
  ``ErrorOut`` (``{"error", "message", ...}``): what the route declares in ``responses``, plus
  what every route of its kind can answer (:func:`_generic_statuses`: 401/403 with auth, 422
  for parameters or a body, 413/415 for a body, 503 for store faults).
* **limits** from the configuration: a schema may carry ``x-config-limit`` (see
  :func:`ingest_api.http.schemas.config_limit`), replaced by the configured value
  (:data:`CONFIG_LIMITS`); every request body states the request size limit.
* **internal operations**: routes marked with ``openapi_extra=INTERNAL`` (what the operator job
  and the Spark sink call) are left out unless ``internal=True``; then they keep
  ``x-internal: true`` and the ``internal`` tag.
* **tidying** for clients: operation ids are the route functions' names (prefixed with the
  tag where two routes share one), and an optional parameter is not also ``null``.

``sparkmq openapi`` prints the document for a configuration (``docs/openapi.json`` is the
default one, kept equal by ``tests/ingest/test_openapi_document.py``).
"""

from __future__ import annotations

import http
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from broker.config import ServerConfig
from ingest_api.http.deps import get_broker, get_principal, require_json_body
from ingest_api.http.routes import api_routes

#: ``openapi_extra`` of a route that the operator job or the Spark sink calls, not users.
INTERNAL: dict[str, Any] = {"x-internal": True}
#: The one security scheme.
BEARER = "bearerAuth"
_ERROR_REF = {"$ref": "#/components/schemas/ErrorOut"}

#: Limits a schema can name with ``x-config-limit``, read from the broker's configuration.
CONFIG_LIMITS: dict[str, Callable[[ServerConfig], int]] = {
    "max_batch_messages": lambda config: config.max_batch_messages,
    "max_message_bytes": lambda config: config.store.max_message_size_bytes,
    "timer_max_delay_ms": lambda config: config.store.timer_max_delay_ms,
    "max_request_bytes": lambda config: config.max_request_bytes,
}

#: What each error status means, for its description in the document.
_MEANING: dict[int, str] = {
    400: "A value the broker refuses (e.g. invalid_topic, invalid_argument, invalid_schedule).",
    401: "Auth is on and the bearer token is missing or unknown (unauthorized).",
    403: "The token lacks the right on the topic (forbidden).",
    404: "No such thing (unknown_topic, unknown_queue, message_not_found, ...).",
    409: "The request conflicts with the current state (e.g. unknown_queue in a body, "
    "offset_out_of_range, producer_group_mismatch).",
    410: "The data was lost (data_lost).",
    413: "Too large: request_too_large, message_too_large, batch_too_large.",
    415: "The body's Content-Type is not one the operation takes (unsupported_media_type).",
    422: "A field fails its schema (validation_error, invalid_batch_entry with index).",
    503: "The store cannot serve now (store_closed, store_not_writable, flush_timeout, ...); "
    "retriable faults carry Retry-After.",
}
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string", "const": "Bearer"}}},
    503: {"Retry-After": {"required": False, "schema": {"type": "string"}}},
}


def openapi_document(
    app: FastAPI,
    config: ServerConfig,
    *,
    auth_required: bool | None = None,
    internal: bool = False,
    body_models: Sequence[type[BaseModel]] = (),
) -> dict[str, Any]:
    """The document for ``app`` served with ``config``.

    ``auth_required`` defaults to whether ``config`` names an auth file; ``internal`` keeps the
    operations marked :data:`INTERNAL`; ``body_models`` are models of bodies a route reads by
    hand (referenced from its ``openapi_extra``), added to the components.
    """
    auth = config.auth_file is not None if auth_required is None else auth_required
    spec = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
        separate_input_output_schemas=app.separate_input_output_schemas,
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in body_models:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    _resolve_config_limits(spec, config)
    _exact_integers(spec)
    for route, _, operation in _operations(app, spec):
        _complete_operation(route, operation, auth, config)
    _name_operations(app, spec)
    if not internal:
        _drop_internal(spec)
        _drop_unreferenced_schemas(spec)
    spec["components"]["securitySchemes"] = {
        BEARER: {
            "type": "http",
            "scheme": "bearer",
            "description": "A token of the broker's --auth-file (docs/http_api.md#auth); "
            + ("required." if auth else "auth is off on this broker, so it is optional."),
        }
    }
    spec["security"] = [{BEARER: []}] if auth else [{}, {BEARER: []}]
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return spec


def _operations(app: FastAPI, spec: dict[str, Any]) -> Iterator[tuple[Any, str, dict[str, Any]]]:
    """(route, method, its operation in ``spec``) for every documented route."""
    for route in api_routes(app.routes):
        if route.include_in_schema:
            for method in sorted(route.methods):
                operation = spec["paths"].get(route.path_format, {}).get(method.lower())
                if operation is not None:
                    yield route, method, operation


def _calls(dependant: Dependant, function: Callable[..., Any]) -> bool:
    """Whether ``function`` is among the route's dependencies (at any depth)."""
    return dependant.call is function or any(_calls(sub, function) for sub in dependant.dependencies)


def _has_body(route: Any, operation: dict[str, Any]) -> bool:
    return route.body_field is not None or "requestBody" in operation


def _generic_statuses(route: Any, operation: dict[str, Any], auth: bool) -> set[int]:
    """The statuses every route like this one can answer, whatever it does."""
    statuses: set[int] = set()
    dependant = route.dependant
    if auth and _calls(dependant, get_principal):
        statuses |= {401, 403}
    if operation.get("parameters") or _has_body(route, operation):
        statuses |= {400, 422}  # a value the store refuses; a value failing its schema
    if _has_body(route, operation):
        statuses.add(413)
        if _calls(dependant, require_json_body):
            statuses.add(415)
    if _calls(dependant, get_broker):
        statuses.add(503)
    return statuses


def _complete_operation(route: Any, operation: dict[str, Any], auth: bool, config: ServerConfig) -> None:
    operation.pop("security", None)  # FastAPI's, from HTTPBearer; the document's is global
    if not _calls(route.dependant, get_principal):
        operation["security"] = []
    responses: dict[str, Any] = operation.setdefault("responses", {})
    declared = {int(status) for status in responses if status.isdigit() and int(status) >= 400}
    for status in sorted(declared | _generic_statuses(route, operation, auth)):
        described = responses.get(str(status), {}).get("description")
        responses[str(status)] = _error_response(status, described)
    operation["responses"] = dict(sorted(responses.items()))
    body = operation.get("requestBody")
    if body is not None:
        limit = f"At most {config.max_request_bytes} bytes (413 request_too_large)."
        body["description"] = f"{body['description']} {limit}" if body.get("description") else limit
    for parameter in operation.get("parameters", []):
        parameter["schema"] = _not_null(parameter["schema"])
    if operation.get("x-internal"):
        operation["tags"] = [*operation.get("tags", []), "internal"]


#: Descriptions FastAPI writes by itself (a route's own description is kept).
_FASTAPI_DESCRIPTIONS = frozenset({"Validation Error", "Successful Response"})


def _error_response(status: int, described: str | None = None) -> dict[str, Any]:
    """The error answer ``status`` with the one error body; a route's own description of it is
    kept, else the status's meaning."""
    phrase = http.HTTPStatus(status).phrase
    own = described if described and described != phrase and described not in _FASTAPI_DESCRIPTIONS else None
    response: dict[str, Any] = {
        "description": own or _MEANING.get(status, phrase),
        "content": {"application/json": {"schema": _ERROR_REF}},
    }
    if status in _HEADERS:
        response["headers"] = _HEADERS[status]
    return response


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter's schema without FastAPI's ``null`` branch (HTTP has no null)."""
    branches = schema.get("anyOf")
    if not branches or {"type": "null"} not in branches:
        return schema
    rest = [branch for branch in branches if branch != {"type": "null"}]
    outer = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**rest[0], **outer} if len(rest) == 1 else {**outer, "anyOf": rest}


def _resolve_config_limits(node: Any, config: ServerConfig) -> None:
    if isinstance(node, dict):
        limits = node.pop("x-config-limit", None)
        if limits is not None:
            for keyword, name in limits.items():
                node[keyword] = CONFIG_LIMITS[name](config)
        for value in node.values():
            _resolve_config_limits(value, config)
    elif isinstance(node, list):
        for value in node:
            _resolve_config_limits(value, config)


#: Keywords FastAPI's OpenAPI models turn into floats (2**62 prints as 4.611686018427388e+18).
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})


def _exact_integers(node: Any) -> None:
    """Integral bounds as JSON integers again: as floats, a client compares 2**62 + 95 with
    2**62 in double precision and finds it in range."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _NUMBER_KEYWORDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                _exact_integers(value)
    elif isinstance(node, list):
        for value in node:
            _exact_integers(value)


def _name_operations(app: FastAPI, spec: dict[str, Any]) -> None:
    """Operation ids from the route functions' names; a name two routes share gets its tag."""
    named = list(_operations(app, spec))
    counts = Counter(route.name for route, _, _ in named)
    for route, _, operation in named:
        tag = route.tags[0] if route.tags else "api"
        operation["operationId"] = route.name if counts[route.name] == 1 else f"{tag}_{route.name}"


def _drop_internal(spec: dict[str, Any]) -> None:
    paths: dict[str, dict[str, Any]] = spec["paths"]
    for path, item in list(paths.items()):
        for method, operation in list(item.items()):
            if isinstance(operation, dict) and operation.get("x-internal"):
                del item[method]
        if not item:
            del paths[path]


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            yield ref.rsplit("/", 1)[1]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _drop_unreferenced_schemas(spec: dict[str, Any]) -> None:
    """Keep the component schemas the paths reach (directly or through other schemas)."""
    schemas: dict[str, Any] = spec["components"]["schemas"]
    reached: set[str] = set()
    pending = list(_refs(spec["paths"]))
    while pending:
        name = pending.pop()
        if name not in reached and name in schemas:
            reached.add(name)
            pending.extend(_refs(schemas[name]))
    for name in set(schemas) - reached:
        del schemas[name]
