"""ASGI middleware timing every HTTP request into ``sparkmq_http_request_duration_seconds``.

Labelled by method, the route *template* (``/topics/{topic}/messages``, never the raw path, so
the label set stays bounded) and the status class. Requests no route matched count as
``unmatched``. Outermost middleware, so the fast lane and size-limit refusals are timed too.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker.metrics import BrokerMetrics

#: Set in the scope by a handler that answers without routing (the fast lane).
ROUTE_KEY = "sparkmq.route"


def route_template(scope: Scope) -> str:
    explicit = scope.get(ROUTE_KEY)
    if isinstance(explicit, str):
        return explicit
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else "unmatched"


class RequestTiming:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            broker = getattr(scope["app"].state, "broker", None)
            metrics: BrokerMetrics | None = getattr(broker, "metrics", None)
            if metrics is not None:
                metrics.http_request(
                    scope["method"], route_template(scope), status, time.perf_counter() - started
                )
