"""Pulling from one queue (JSON or Arrow IPC, with long-poll) and offset lookup by time."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Query, Request, Response

from broker.auth import Right, authorize
from broker.config import MAX_PULL_MESSAGES, MAX_WAIT_MS
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http.batches import ARROW_STREAM
from ingest_api.http.cluster_reads import redirect_to_owner
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.render import message_stream, messages_from_batch
from ingest_api.http.schemas import ErrorOut, OffsetOut, PullOut
from ingest_api.params import AnyTopicPath, QueuePath
from store import (
    RETRY_TOPIC_PREFIX,
    BatchReadResult,
    Boundary,
    GetStatus,
    MessageStore,
    UnknownQueue,
    UnknownTopic,
    present_retry,
    validate_topic,
)

router = APIRouter(
    prefix="/topics/{topic}/queues/{queue_id}",
    tags=["queues"],
    responses={
        307: {
            "model": ErrorOut,
            "description": "Cluster mode: the queue lives on another broker "
            "(Location: the same request there).",
        }
    },
)

#: Statuses after which waiting for new messages makes sense.
_WAITABLE = {GetStatus.NO_NEW_MESSAGE, GetStatus.NO_MATCHED_MESSAGE, GetStatus.NO_MESSAGE_IN_QUEUE}


@dataclass(frozen=True)
class _Pulled:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    count: int
    body_bytes: int
    #: JSON text or Arrow IPC stream bytes.
    payload: str | memoryview


def _check_queue(store: MessageStore, topic: str, queue_id: int) -> None:
    validate_topic(topic, allow_system=True)  # parked messages are readable (the operators read them)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    queues = store.queue_count(topic)
    if queue_id >= queues:
        raise UnknownQueue(f"queue {queue_id} does not exist; topic {topic!r} has {queues} queues")


@dataclass(frozen=True)
class _PullSpec:
    topic: str
    queue_id: int
    offset: int
    limit: int
    tags: str


def _read(store: MessageStore, spec: _PullSpec) -> BatchReadResult:
    result = store.read_batch(
        spec.topic, spec.queue_id, spec.offset, max_messages=spec.limit, tag_expression=spec.tags
    )
    if result.status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
        _check_queue(store, spec.topic, spec.queue_id)
    if spec.topic.startswith(RETRY_TOPIC_PREFIX):  # shown under the original topic, as RocketMQ's client
        result = dataclasses.replace(result, batch=present_retry(result.batch))
    return result


def _body_bytes(batch: pa.RecordBatch) -> int:
    return int(pc.sum(pc.binary_length(batch.column("body"))).as_py() or 0) if batch.num_rows else 0


def _pull_json(store: MessageStore, spec: _PullSpec) -> _Pulled:
    """Messages as ``PullOut`` JSON, converted column-wise from the batch read path."""
    result = _read(store, spec)
    payload = json.dumps(
        {
            "status": result.status.value,
            "messages": messages_from_batch(result.batch),
            "next_offset": result.next_offset,
            "min_offset": result.min_offset,
            "max_offset": result.max_offset,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return _Pulled(
        result.status, result.next_offset, result.min_offset, result.max_offset,
        result.batch.num_rows, _body_bytes(result.batch), payload,
    )  # fmt: skip


def _pull_arrow(store: MessageStore, spec: _PullSpec) -> _Pulled:
    result = _read(store, spec)
    batch = result.batch
    return _Pulled(
        result.status, result.next_offset, result.min_offset, result.max_offset,
        batch.num_rows, _body_bytes(batch), message_stream(batch),
    )  # fmt: skip


def _wants_arrow(request: Request) -> bool:
    return ARROW_STREAM in request.headers.get("accept", "")


async def _pull_with_wait(broker: Broker, spec: _PullSpec, wait_ms: int, arrow: bool) -> _Pulled:
    read = _pull_arrow if arrow else _pull_json
    store = broker.store
    pulled = await run_blocking(read, store, spec)
    deadline = time.monotonic() + wait_ms / 1000

    async def current_max() -> int:
        return await run_blocking(store.max_offset, spec.topic, spec.queue_id)

    while pulled.count == 0 and pulled.status in _WAITABLE:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        spec = replace(spec, offset=pulled.next_offset)
        if not await broker.hub.wait(spec.topic, spec.queue_id, spec.offset, remaining, current_max):
            break
        pulled = await run_blocking(read, store, spec)
    return pulled


def _offset_header(description: str) -> dict[str, Any]:
    return {
        "required": False,
        "description": description,
        "schema": {"type": "string", "pattern": "^-?[0-9]+$"},
    }


_PULL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "headers": {
            "X-Status": {
                "required": False,
                "description": "Arrow answers: the read status (as PullOut.status).",
                "schema": {"type": "string"},
            },
            "X-Next-Offset": _offset_header("Arrow answers: the offset to pull from next."),
            "X-Min-Offset": _offset_header("Arrow answers: the queue's min offset."),
            "X-Max-Offset": _offset_header("Arrow answers: the queue's max offset."),
        },
        "content": {
            ARROW_STREAM: {
                "schema": {"type": "string", "format": "binary"},
                "description": "Arrow IPC stream in store.format.arrow_schema.MESSAGE_SCHEMA; offsets in "
                "the X-Status, X-Next-Offset, X-Min-Offset and X-Max-Offset headers.",
            }
        },
    },
    404: {"model": ErrorOut},
}


@router.get("/messages", response_model=PullOut, responses=_PULL_RESPONSES)
async def pull(
    *,
    topic: AnyTopicPath,
    queue_id: QueuePath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0, le=2**62, description="Queue offset to read from.")] = 0,
    max_messages: Annotated[int, Query(ge=1, le=MAX_PULL_MESSAGES)] = 32,
    tags: Annotated[
        str | None, Query(max_length=4096, description="Tag expression: '*' or 'A || B'.")
    ] = None,
    wait_ms: Annotated[
        int, Query(ge=0, le=MAX_WAIT_MS, description="Long-poll: wait up to this long for a message.")
    ] = 0,
) -> Response:
    """Messages from ``offset`` on, plus ``next_offset``. With ``Accept:
    application/vnd.apache.arrow.stream`` the answer is an Arrow IPC stream (the Spark path)."""
    authorize(principal, Right.CONSUME, topic)
    await redirect_to_owner(topic, queue_id, request, broker)  # in a cluster: 307 to the owner
    arrow = _wants_arrow(request)
    spec = _PullSpec(topic=topic, queue_id=queue_id, offset=offset, limit=max_messages, tags=tags or "*")
    pulled = await _pull_with_wait(broker, spec, wait_ms, arrow)
    broker.metrics.consumed(topic, pulled.count, pulled.body_bytes)
    if not arrow:
        return Response(pulled.payload, media_type="application/json")
    headers = {
        "X-Status": pulled.status.value,
        "X-Next-Offset": str(pulled.next_offset),
        "X-Min-Offset": str(pulled.min_offset),
        "X-Max-Offset": str(pulled.max_offset),
    }
    return Response(pulled.payload, media_type=ARROW_STREAM, headers=headers)


def _offset_for_timestamp(
    store: MessageStore, topic: str, queue_id: int, *, timestamp_ms: int, boundary: Boundary
) -> int:
    _check_queue(store, topic, queue_id)
    return store.offset_for_timestamp(topic, queue_id, timestamp_ms, boundary)


@router.get("/offset", response_model=OffsetOut, responses={404: {"model": ErrorOut}})
async def offset_for_timestamp(
    *,
    topic: AnyTopicPath,
    queue_id: QueuePath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    timestamp_ms: Annotated[int, Query(ge=0, le=2**62, description="Store time in ms.")],
    boundary: Annotated[
        Literal["lower", "upper"],
        Query(description="lower: first offset stored at/after T; upper: last offset stored at/before T."),
    ] = "lower",
) -> OffsetOut:
    """The queue offset matching a store timestamp (RocketMQ ``searchOffset``)."""
    authorize(principal, Right.CONSUME, topic)
    await redirect_to_owner(topic, queue_id, request, broker)  # in a cluster: 307 to the owner
    offset = await run_blocking(
        _offset_for_timestamp,
        broker.store,
        topic,
        queue_id,
        timestamp_ms=timestamp_ms,
        boundary=Boundary(boundary),
    )
    return OffsetOut(
        topic=topic, queue_id=queue_id, timestamp_ms=timestamp_ms, boundary=boundary, offset=offset
    )
