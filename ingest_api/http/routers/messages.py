"""Producing (one or a batch) and querying messages by key or id."""

from __future__ import annotations

import time
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from broker import peers
from broker.auth import Right, authorize
from broker.errors import BrokerError
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http import batches, cluster_produce, producing
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep, media_type
from ingest_api.http.fields import config_limit
from ingest_api.http.local_produce import BatchRequest, produce_batch_here, produce_one
from ingest_api.http.schemas import (
    ErrorOut,
    MessageOut,
    ProduceBatchOut,
    ProduceIn,
    ProduceOut,
    QueryOut,
)
from ingest_api.params import USER_TOPIC, IdempotencyKeyHeader, TopicPath
from store import (
    InvalidArgument,
    MessageStore,
    MessageView,
    UnknownTopic,
    validate_topic,
)

router = APIRouter(tags=["messages"])

_PRODUCE_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut} for status in (400, 404, 409, 413, 415, 422, 503)
}
_BATCH_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_PRODUCE_ERRORS,
    201: {
        "description": "Stored, every message (results in input order).",
        "content": {
            batches.ARROW_STREAM: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "With Accept: application/vnd.apache.arrow.stream: an Arrow IPC "
                    "stream, one row per message (msg_id, uniq_key, topic, queue_id, queue_offset, "
                    "commitlog_offset, store_timestamp).",
                }
            }
        },
    },
}

_BATCH_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            batches.JSON: {"schema": {"$ref": "#/components/schemas/ProduceBatchIn"}},
            batches.NDJSON: {
                "schema": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/ProduceEntryIn"},
                    "minItems": 1,
                    "description": "One ProduceEntryIn JSON object per line.",
                    **config_limit(maxItems="max_batch_messages"),
                }
            },
            batches.ARROW_STREAM: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Arrow IPC stream: body (binary|string) and optional tags, keys "
                    "(list<string>), properties (map<string,string>), queue_id, sharding_key, delay_level, "
                    "deliver_at_ms (int64), delay_ms (int64).",
                }
            },
        },
    }
}


@router.post(
    "/topics/{topic}/messages",
    status_code=201,
    response_model=ProduceOut,
    dependencies=[JsonBody],
    responses=_PRODUCE_ERRORS,
)
async def produce(
    topic: TopicPath,
    entry: ProduceIn,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Produce one message. 201 means stored (and fsynced when the broker runs SYNC_FLUSH).
    With an ``Idempotency-Key`` header a retry returns the original result (201) instead of
    storing the message again, also across broker restarts. In a cluster the message is stored
    by the broker that owns its queue (forwarded when that is another one), and the answer
    names it (``broker``)."""
    authorize(principal, Right.PRODUCE, topic)
    producer = producing.idempotency_ref(topic, idempotency_key)
    if broker.cluster is not None:
        status, body = await cluster_produce.produce_single(
            broker, topic, entry, request.headers, idempotency_key
        )
        return Response(body, status_code=status, media_type="application/json")
    return await produce_one(broker, topic, entry, producer)


@router.post(
    "/topics/{topic}/messages:batch",
    status_code=201,
    response_model=ProduceBatchOut,
    openapi_extra=_BATCH_BODY,
    responses=_BATCH_RESPONSES,
)
async def produce_batch(
    topic: TopicPath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response:
    """Produce many messages atomically: all are stored or none (an invalid entry's ``index`` is
    reported). Accepts JSON ``{"messages": [...]}``, NDJSON, or an Arrow IPC stream. With
    ``Accept: application/vnd.apache.arrow.stream`` the results come back as an Arrow stream
    (columns msg_id, uniq_key, topic, queue_id, queue_offset, commitlog_offset, store_timestamp).
    With an ``Idempotency-Key`` header a retried batch returns the original results instead of
    storing the batch again, also across broker restarts."""
    authorize(principal, Right.PRODUCE, topic)
    producer = producing.idempotency_ref(topic, idempotency_key)
    content_type = media_type(request) or batches.JSON
    if content_type not in (batches.JSON, batches.NDJSON, batches.ARROW_STREAM):
        raise BrokerError(
            415,
            "unsupported_media_type",
            f"unsupported Content-Type {content_type!r}; use {batches.JSON}, {batches.NDJSON} "
            f"or {batches.ARROW_STREAM}",
        )
    raw = await request.body()
    started = time.perf_counter()
    arrow_results = batches.ARROW_STREAM in request.headers.get("accept", "")
    if broker.cluster is not None:
        return await _produce_batch_clustered(
            broker, topic, content_type, raw, request, idempotency_key, arrow_results, principal, started
        )
    batch_request = BatchRequest(
        topic,
        content_type,
        raw,
        arrow_results,
        producer,
        lambda other: authorize(principal, Right.PRODUCE, other),
    )
    payload, count, body_bytes = await run_blocking(produce_batch_here, broker, batch_request)
    broker.metrics.produced(topic, count, body_bytes, "batch", time.perf_counter() - started)
    media = batches.ARROW_STREAM if arrow_results else "application/json"
    return Response(payload, status_code=201, media_type=media)


async def _produce_batch_clustered(
    broker: Broker,
    topic: str,
    content_type: str,
    raw: bytes,
    request: Request,
    idempotency_key: str | None,
    arrow_results: bool,
    principal: Any,
    started: float,
) -> Response:
    """A batch in a cluster: each message stored by its queue's owner (docs/http_api.md#cluster)."""
    if content_type == batches.ARROW_STREAM:
        status, payload, media, count = await cluster_produce.produce_arrow_batch(
            broker, topic, raw, request.headers, idempotency_key, arrow_results
        )
    else:
        status, payload, media, count = await cluster_produce.produce_json_batch(
            broker,
            topic,
            content_type,
            raw,
            request.headers,
            idempotency_key,
            arrow_results,
            lambda other: authorize(principal, Right.PRODUCE, other),
        )
    broker.metrics.produced(topic, count, 0, "batch", time.perf_counter() - started)
    return Response(payload, status_code=status, media_type=media)


def _query_by_key(
    store: MessageStore, topic: str, key: str, *, begin_ms: int, end_ms: int, limit: int
) -> QueryOut:
    validate_topic(topic)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    views = store.query_by_key(topic, key, begin_ms, end_ms, limit)
    return QueryOut(messages=[MessageOut.of(view) for view in views])


@router.get("/topics/{topic}/messages", response_model=QueryOut, responses={404: {"model": ErrorOut}})
async def query_by_key(
    *,
    topic: TopicPath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    key: Annotated[str, Query(min_length=1, max_length=1024, description="A key given at produce time.")],
    begin_ms: Annotated[int, Query(ge=0, le=2**62, description="Store time lower bound (ms).")] = 0,
    end_ms: Annotated[int, Query(ge=0, le=2**62, description="Store time upper bound (ms).")] = 2**62,
    max_results: Annotated[int, Query(alias="max", ge=1, le=1000)] = 64,
) -> QueryOut:
    """Messages with ``key`` stored between ``begin_ms`` and ``end_ms``, newest first. In a
    cluster every broker is asked."""
    authorize(principal, Right.CONSUME, topic)
    query = partial(
        _query_by_key, broker.store, topic, key, begin_ms=begin_ms, end_ms=end_ms, limit=max_results
    )
    if peers.is_local_request(broker, request.headers):
        return await run_blocking(query)
    assert broker.cluster is not None
    if broker.cluster.view.placement(topic) is None:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    params = {"key": key, "begin_ms": begin_ms, "end_ms": end_ms, "max": max_results}
    others = await peers.ask_others(broker, f"/topics/{topic}/messages", request.headers, params)
    found = [m for answer in others.values() for m in answer["messages"]]
    if broker.store.has_topic(topic):
        found += [m.model_dump() for m in (await run_blocking(query)).messages]
    return QueryOut.model_validate({"messages": peers.newest_first(found, max_results)})


def _real_topic(view: MessageView) -> str:
    return view.properties.get("REAL_TOPIC", view.topic)


def _find_message(store: MessageStore, msg_id: str, topic: str | None) -> MessageView:
    view: MessageView | None = None
    if len(msg_id) == 32:
        try:
            view = store.get_by_msg_id(msg_id)
        except InvalidArgument:
            view = None
        if view is not None and view.msg_id.upper() != msg_id.upper():
            view = None
        if view is not None and topic is not None and _real_topic(view) != topic:
            view = None
    if view is None:
        if topic is not None:
            validate_topic(topic)
        candidates = [topic] if topic is not None else sorted(store.topics())
        for candidate in candidates:
            if store.has_topic(candidate):
                view = store.get_by_uniq_key(candidate, msg_id)
                if view is not None:
                    break
    if view is None:
        raise BrokerError(404, "message_not_found", f"no message with id {msg_id!r}")
    return view


@router.get("/messages/{msg_id}", response_model=MessageOut, responses={404: {"model": ErrorOut}})
async def get_message(
    msg_id: Annotated[str, Path(min_length=1, max_length=128, description="offsetMsgId or UNIQ_KEY.")],
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    topic: Annotated[
        str | None, Query(**USER_TOPIC, description="Restrict a UNIQ_KEY lookup to this topic.")
    ] = None,
) -> MessageOut:
    """One message by offsetMsgId (32 hex chars) or by UNIQ_KEY (searched in ``topic``, or in
    every topic when omitted). In a cluster every broker is asked."""
    try:
        view = await run_blocking(_find_message, broker.store, msg_id, topic)
    except BrokerError as missing:
        if peers.is_local_request(broker, request.headers) or missing.status != 404:
            raise
        params = {"topic": topic} if topic is not None else None
        others = await peers.ask_others(broker, f"/messages/{msg_id}", request.headers, params)
        if not others:
            raise
        found = MessageOut.model_validate(next(iter(others.values())))
        authorize(principal, Right.CONSUME, found.properties.get("REAL_TOPIC", found.topic))
        return found
    authorize(principal, Right.CONSUME, _real_topic(view))
    out = MessageOut.of(view)
    broker.metrics.consumed(view.topic, 1, len(view.body))
    return out
