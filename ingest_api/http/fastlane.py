"""A pure-ASGI fast lane in front of the whole app for the hottest happy paths.

``POST /topics/{topic}/messages`` with ``Content-Type: application/json`` costs about 0.3 ms
of FastAPI dependency solving and body handling per request, several times what storing the
message costs. The fast lane recognises that request by its method, path and exact
Content-Type, reads the body, and only when everything the route would check passes (topic
pattern, size limit, auth, ``ProduceIn.model_validate_json``) calls the route's own
:func:`ingest_api.http.local_produce.produce_one_json`. ``POST /transactions/{transaction_id}``
(the end of a transaction: half of a single-message transaction's requests) takes the same
lane to :func:`ingest_api.http.routers.transactions.end_transaction_json`. Anything else
(another path or content type, a failed check, a client that went away mid-body) is handed to
the app unchanged, with the body messages already read replayed, so every refusal is the app's own answer and
the OpenAPI spec still documents the real route. Errors raised while producing (unknown
topic without auto-creation, queue out of range, store faults) are rendered by the app's
exception mapping (:func:`ingest_api.http.errors.response_for`), so they are the same bytes too.

It wraps the app's whole middleware stack (:func:`install`), so what those layers do for
the requests it answers, it does itself: the request-duration metric (``RequestTiming``),
the body size limit (a larger body is handed to the app, which refuses it) and the bare 500
of Starlette's ``ServerErrorMiddleware`` for a bug. Skipping them and Starlette's response
object halves the Python work per request around the store call.
"""

from __future__ import annotations

import re
import time

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from broker.auth import Principal, Right, authorize, caller
from broker.errors import BrokerError
from broker.state import Broker
from ingest_api.http import cluster_produce
from ingest_api.http.errors import response_for
from ingest_api.http.local_produce import produce_one_json
from ingest_api.http.routers.transactions import end_transaction_json
from ingest_api.http.schemas import EndTransactionIn, ProduceIn
from ingest_api.http.timing import ROUTE_KEY
from ingest_api.params import TOPIC_PATTERN
from store import SparkMQError

_TOPIC = re.compile(TOPIC_PATTERN)
#: TopicPath's max_length.
_MAX_TOPIC = 255
_PREFIX = "/topics/"
_ROUTE = "/topics/{topic}/messages"
_JSON_CONTENT_TYPE = (b"content-type", b"application/json")
_SUFFIX = "/messages"
_END_PREFIX = "/transactions/"
_END_ROUTE = "/transactions/{transaction_id}"
#: TransactionPath's max_length.
_MAX_TRANSACTION_ID = 128


def _end_transaction_id(scope: Scope) -> str | None:
    """The id of a ``POST /transactions/{transaction_id}`` the route would accept."""
    if scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not path.startswith(_END_PREFIX):
        return None
    transaction_id = path[len(_END_PREFIX) :]
    if not transaction_id or len(transaction_id) > _MAX_TRANSACTION_ID or "/" in transaction_id:
        return None
    return transaction_id


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

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        topic = _single_produce_topic(scope) if scope["type"] == "http" else None
        transaction_id = _end_transaction_id(scope) if topic is None and scope["type"] == "http" else None
        if topic is None and transaction_id is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        content_type = authorization = None
        declared = 0
        cluster_headers: dict[str, str] = {}
        for name, value in scope["headers"]:
            if name == b"content-type":
                if content_type is None:
                    content_type = value
            elif name == b"content-length":
                declared = int(value) if value.isdigit() else self.max_bytes + 1
            elif name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"idempotency-key":  # idempotent produces take the documented route
                await self.app(scope, receive, send)
                return
            elif name.startswith(b"x-sparkmq-"):  # a forwarded produce (cluster mode)
                cluster_headers[name.decode("latin-1")] = value.decode("latin-1")
        if content_type != b"application/json" or declared > self.max_bytes:
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        size = 0
        while True:
            message = await receive()
            received.append(message)
            size += len(message.get("body", b""))
            if (
                message["type"] != "http.request"
                or not message.get("more_body", False)
                or size > self.max_bytes
            ):
                break
        broker: Broker = scope["app"].state.broker
        complete = message["type"] == "http.request" and size <= self.max_bytes
        answer_call = None
        if complete and topic is not None:
            entry = _accepted_entry(broker, topic, _auth_headers(authorization, cluster_headers), received)
            if entry is not None:
                route = _ROUTE
                if authorization is not None:
                    cluster_headers["authorization"] = authorization
                answer_call = lambda: _produce(broker, topic, entry, cluster_headers)  # noqa: E731
        elif complete and transaction_id is not None:
            accepted = _accepted_end(broker, _auth_headers(authorization, cluster_headers), received)
            if accepted is not None:
                principal, body = accepted
                route = _END_ROUTE
                if authorization is not None:
                    cluster_headers["authorization"] = authorization
                answer_call = lambda: end_transaction_json(  # noqa: E731
                    broker, principal, transaction_id, body, cluster_headers
                )
        if answer_call is None:
            await self.app(scope, _replay(received, receive), send)
            return
        scope[ROUTE_KEY] = route
        status = 500
        try:
            try:
                ok_status, answer = await answer_call()
            except (BrokerError, SparkMQError) as exc:
                response = response_for(exc)
                status = response.status_code
                await response(scope, receive, send)
                return
            status = ok_status
            headers = [(b"content-length", str(len(answer)).encode()), _JSON_CONTENT_TYPE]
            await send({"type": "http.response.start", "status": ok_status, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
        except Exception:
            if status == 500:  # nothing sent yet: Starlette's ServerErrorMiddleware answer
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send)
            raise
        finally:
            broker.metrics.http_request("POST", route, status, time.perf_counter() - started)


async def _produce(
    broker: Broker, topic: str, entry: ProduceIn, headers: dict[str, str]
) -> tuple[int, bytes]:
    """One produce: stored here (a lone broker), or by its queue's owner (a cluster)."""
    if broker.cluster is None:
        return 201, await produce_one_json(broker, topic, entry)
    return await cluster_produce.produce_single(broker, topic, entry, headers, None)


def install(app: Starlette, max_bytes: int) -> None:
    """Put the fast lane in front of ``app``'s whole middleware stack (Starlette builds the
    stack on the first request; this wraps what it builds)."""
    build = app.build_middleware_stack

    def build_with_lane() -> ASGIApp:
        return FastLane(build(), max_bytes)

    app.build_middleware_stack = build_with_lane  # type: ignore[method-assign]


def _auth_headers(authorization: str | None, cluster_headers: dict[str, str]) -> dict[str, str]:
    """What authentication reads: the credential and the peer headers (a forwarded request is
    judged on the user it carries, :func:`broker.auth.caller`)."""
    headers = dict(cluster_headers)
    if authorization is not None:
        headers["authorization"] = authorization
    return headers


def _accepted_entry(
    broker: Broker, topic: str, headers: dict[str, str], received: list[Message]
) -> ProduceIn | None:
    """The validated entry when the route would accept this request, else None."""
    if broker.auth is not None:
        try:
            authorize(caller(broker.auth, headers), Right.PRODUCE, topic)
        except BrokerError:
            return None
    raw = (
        received[0].get("body", b"") if len(received) == 1 else b"".join(m.get("body", b"") for m in received)
    )
    try:
        return ProduceIn.model_validate_json(raw)
    except ValidationError:
        return None


def _accepted_end(
    broker: Broker, headers: dict[str, str], received: list[Message]
) -> tuple[Principal | None, EndTransactionIn] | None:
    """The principal and the validated body when the end route would accept them, else None
    (the route then answers: 401, 422, ...)."""
    principal = None
    if broker.auth is not None:
        try:
            principal = caller(broker.auth, headers)
        except BrokerError:
            return None
    raw = b"".join(m.get("body", b"") for m in received)
    try:
        return principal, EndTransactionIn.model_validate_json(raw)
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
