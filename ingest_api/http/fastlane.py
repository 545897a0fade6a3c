"""A pure-ASGI fast lane in front of the FastAPI routes for the hottest happy path.

``POST /topics/{topic}/messages`` with ``Content-Type: application/json`` costs about 0.3 ms
of FastAPI dependency solving and body handling per request, several times what storing the
message costs. The fast lane recognises that request by its method, path and exact
Content-Type, reads the body, and only when everything the route would check passes (topic
pattern, auth, ``ProduceIn.model_validate_json``) calls the route's own
:func:`ingest_api.http.routers.messages.produce_one`. Anything else (another path or content type,
a failed check, a client that went away mid-body) is handed to the FastAPI app unchanged,
with the body messages already read replayed, so every refusal is the app's own answer and
the OpenAPI spec still documents the real route. Errors raised while producing (unknown
topic without auto-creation, queue out of range, store faults) are rendered by the app's
exception mapping (:func:`ingest_api.http.errors.response_for`), so they are the same bytes too.
"""

from __future__ import annotations

import re

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ingest_api.http.auth import Right, authenticate, authorize
from ingest_api.http.broker import Broker
from ingest_api.http.errors import ApiError, response_for
from ingest_api.http.params import TOPIC_PATTERN
from ingest_api.http.routers.messages import produce_one
from ingest_api.http.schemas import ProduceIn
from ingest_api.http.timing import ROUTE_KEY
from store import SparkMQError

_TOPIC = re.compile(TOPIC_PATTERN)
#: TopicPath's max_length.
_MAX_TOPIC = 255
_PREFIX = "/topics/"
_SUFFIX = "/messages"


def _single_produce_topic(scope: Scope) -> str | None:
    """The topic of a ``POST /topics/{topic}/messages`` whose topic the route would accept."""
    if scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
        return None
    topic = path[len(_PREFIX) : -len(_SUFFIX)]
    if not topic or len(topic) > _MAX_TOPIC or "/" in topic or _TOPIC.fullmatch(topic) is None:
        return None
    return topic


class FastLane:
    """ASGI middleware: the fast single produce, or the wrapped app for anything else."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        topic = _single_produce_topic(scope) if scope["type"] == "http" else None
        if topic is None:
            await self.app(scope, receive, send)
            return
        content_type = authorization = None
        for name, value in scope["headers"]:
            if name == b"content-type":
                if content_type is None:
                    content_type = value
            elif name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"idempotency-key":  # idempotent produces take the documented route
                await self.app(scope, receive, send)
                return
        if content_type != b"application/json":
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        broker: Broker = scope["app"].state.broker
        entry = None
        if message["type"] == "http.request":
            entry = _accepted_entry(broker, topic, authorization, received)
        if entry is None:
            await self.app(scope, _replay(received, receive), send)
            return
        scope[ROUTE_KEY] = "/topics/{topic}/messages"
        try:
            response = await produce_one(broker, topic, entry)
        except (ApiError, SparkMQError) as exc:
            response = response_for(exc)
        await response(scope, receive, send)


def _accepted_entry(
    broker: Broker, topic: str, authorization: str | None, received: list[Message]
) -> ProduceIn | None:
    """The validated entry when the route would accept this request, else None."""
    if broker.tokens is not None:
        try:
            authorize(authenticate(broker.tokens, authorization), Right.PRODUCE, topic)
        except ApiError:
            return None
    raw = (
        received[0].get("body", b"") if len(received) == 1 else b"".join(m.get("body", b"") for m in received)
    )
    try:
        return ProduceIn.model_validate_json(raw)
    except ValidationError:
        return None


def _replay(received: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that returns the messages already read, then reads on."""
    pending = list(received)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
