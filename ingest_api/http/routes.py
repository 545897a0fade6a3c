"""The app's API routes as one flat list, whatever FastAPI does with included routers.

FastAPI 0.160 and later keep an included router as one lazy ``_IncludedRouter`` entry of
``app.routes`` and expose its routes through ``fastapi.routing.iter_route_contexts`` (each
context reads like the route with its full path); earlier versions copy the routes in. The
OpenAPI pass (:mod:`ingest_api.http.openapi`) and the ``Allow`` header of a 405
(:mod:`ingest_api.http.errors`) both read the routes through :func:`api_routes`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from fastapi import routing
from starlette.routing import BaseRoute


def api_routes(routes: Sequence[BaseRoute]) -> Iterator[Any]:
    """Every API route (``APIRoute`` or a context that reads like one: ``path_format``,
    ``path_regex``, ``methods``, ``dependant``, ``name``, ``tags``, ``include_in_schema``, ...)."""
    iter_route_contexts = getattr(routing, "iter_route_contexts", None)
    if iter_route_contexts is None:
        yield from (route for route in routes if isinstance(route, routing.APIRoute))
        return
    for context in iter_route_contexts(routes):
        if isinstance(context.original_route, routing.APIRoute):
            yield context


def allowed_methods(routes: Sequence[BaseRoute], path: str) -> list[str]:
    """The methods of every API route whose path template matches ``path`` (sorted), what the
    ``Allow`` header of a 405 lists."""
    methods: set[str] = set()
    for route in api_routes(routes):
        if route.path_regex.match(path):
            methods |= set(route.methods or ())
    return sorted(methods)
