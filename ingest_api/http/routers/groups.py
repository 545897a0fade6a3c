"""``/groups``: committed offsets, reset by time or to an end, and lag."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from ingest_api.http.auth import Right, authorize, authorize_global_admin
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.errors import ApiError
from ingest_api.http.params import TOPIC_PATTERN, GroupPath
from ingest_api.http.schemas import (
    ErrorOut,
    GroupLagOut,
    GroupListOut,
    GroupOffsetsIn,
    GroupOffsetsOut,
    GroupResetIn,
    QueueLagOut,
)
from store import Boundary, MessageStore, UnknownTopic, validate_group, validate_topic

router = APIRouter(
    prefix="/groups", tags=["groups"], responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}}
)

TopicQuery = Annotated[
    str, Query(min_length=1, max_length=255, pattern=TOPIC_PATTERN, description="Topic name.")
]


def _queue_count(store: MessageStore, group: str, topic: str) -> int:
    validate_group(group)
    validate_topic(topic)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return store.queue_count(topic)


def _offsets(store: MessageStore, group: str, topic: str) -> GroupOffsetsOut:
    queues = _queue_count(store, group, topic)
    committed = store.committed_offsets(group, topic)
    offsets = {queue_id: committed.get(queue_id, -1) for queue_id in range(queues)}
    return GroupOffsetsOut(group=group, topic=topic, offsets=offsets)


@router.get("", response_model=GroupListOut)
async def list_groups(broker: BrokerDep, principal: PrincipalDep) -> GroupListOut:
    """Every group with committed offsets, and the topics it has them for."""
    authorize_global_admin(principal)
    return GroupListOut(groups=await run_in_threadpool(broker.store.groups))


@router.get("/{group}/offsets", response_model=GroupOffsetsOut)
async def get_offsets(
    group: GroupPath, topic: TopicQuery, broker: BrokerDep, principal: PrincipalDep
) -> GroupOffsetsOut:
    """The group's committed (next-to-consume) offset per queue; -1 where it never committed."""
    authorize(principal, Right.CONSUME, topic)
    return await run_in_threadpool(_offsets, broker.store, group, topic)


def _commit(store: MessageStore, group: str, topic: str, offsets: dict[int, int]) -> GroupOffsetsOut:
    queues = _queue_count(store, group, topic)
    for queue_id, offset in sorted(offsets.items()):
        if queue_id >= queues:
            raise ApiError(
                400, "unknown_queue", f"queue {queue_id} does not exist; topic {topic!r} has {queues}"
            )
        high = store.max_offset(topic, queue_id)
        if offset > high:
            raise ApiError(
                400,
                "offset_out_of_range",
                f"offset {offset} for queue {queue_id} is past its max offset {high}",
            )
    store.commit_offsets(group, topic, offsets)
    return _offsets(store, group, topic)


@router.put("/{group}/offsets", response_model=GroupOffsetsOut, dependencies=[JsonBody])
async def put_offsets(
    group: GroupPath, spec: GroupOffsetsIn, broker: BrokerDep, principal: PrincipalDep
) -> GroupOffsetsOut:
    """Commit next-to-consume offsets, e.g. ``{"topic": "orders", "offsets": {"0": 12}}``."""
    authorize(principal, Right.CONSUME, spec.topic)
    return await run_in_threadpool(_commit, broker.store, group, spec.topic, dict(spec.offsets))


def _reset(store: MessageStore, group: str, spec: GroupResetIn) -> GroupOffsetsOut:
    queues = _queue_count(store, group, spec.topic)
    offsets: dict[int, int] = {}
    for queue_id in range(queues):
        if spec.to == "earliest":
            offsets[queue_id] = store.min_offset(spec.topic, queue_id)
        elif spec.to == "latest":
            offsets[queue_id] = store.max_offset(spec.topic, queue_id)
        else:
            assert spec.timestamp_ms is not None
            offsets[queue_id] = store.offset_for_timestamp(
                spec.topic, queue_id, spec.timestamp_ms, Boundary.LOWER
            )
    store.commit_offsets(group, spec.topic, offsets)
    return GroupOffsetsOut(group=group, topic=spec.topic, offsets=offsets)


@router.post("/{group}/reset", response_model=GroupOffsetsOut, dependencies=[JsonBody])
async def reset_offsets(
    group: GroupPath, spec: GroupResetIn, broker: BrokerDep, principal: PrincipalDep
) -> GroupOffsetsOut:
    """Move every queue's offset to the first message stored at/after ``timestamp_ms``, or to
    the ``earliest`` / ``latest`` offset."""
    authorize(principal, Right.CONSUME, spec.topic)
    return await run_in_threadpool(_reset, broker.store, group, spec)


def _lag(store: MessageStore, group: str, topic: str) -> GroupLagOut:
    queues = _queue_count(store, group, topic)
    committed = store.committed_offsets(group, topic)
    lags = store.lag(group, topic)
    rows = [
        QueueLagOut(
            queue_id=queue_id,
            committed_offset=committed.get(queue_id, -1),
            max_offset=store.max_offset(topic, queue_id),
            lag=lags.get(queue_id, 0),
        )
        for queue_id in range(queues)
    ]
    return GroupLagOut(group=group, topic=topic, queues=rows, total_lag=sum(row.lag for row in rows))


@router.get("/{group}/lag", response_model=GroupLagOut)
async def get_lag(
    group: GroupPath, topic: TopicQuery, broker: BrokerDep, principal: PrincipalDep
) -> GroupLagOut:
    """Per queue: max offset - committed offset (a queue never committed counts from its min
    offset), and the total."""
    authorize(principal, Right.CONSUME, topic)
    return await run_in_threadpool(_lag, broker.store, group, topic)
