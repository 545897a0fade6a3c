"""``/topics``: create or grow, list, describe, delete."""

from __future__ import annotations

from fastapi import APIRouter, Response
from starlette.concurrency import run_in_threadpool

from ingest_api.http.auth import Right, authorize
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.params import AnyTopicPath, TopicPath
from ingest_api.http.schemas import ErrorOut, QueueOffsetsOut, TopicIn, TopicListOut, TopicOut
from store import MessageStore, UnknownTopic, validate_topic

router = APIRouter(prefix="/topics", tags=["topics"], responses={404: {"model": ErrorOut}})


def _create_or_grow(store: MessageStore, topic: str, queues: int) -> tuple[bool, int]:
    validate_topic(topic)
    existed = store.has_topic(topic)
    return existed, store.create_topic(topic, queues)


@router.put(
    "/{topic}",
    response_model=TopicOut,
    dependencies=[JsonBody],
    status_code=201,
    responses={200: {"model": TopicOut, "description": "The topic existed (and may have grown)."}},
)
async def create_or_grow_topic(
    topic: TopicPath, spec: TopicIn, broker: BrokerDep, principal: PrincipalDep, response: Response
) -> TopicOut:
    """Create a topic with ``queues`` queues, or grow an existing one (queues never shrink)."""
    authorize(principal, Right.ADMIN, topic)
    existed, queues = await run_in_threadpool(_create_or_grow, broker.store, topic, spec.queues)
    if existed:
        response.status_code = 200
    return TopicOut(topic=topic, queues=queues)


@router.get("", response_model=TopicListOut)
async def list_topics(broker: BrokerDep, principal: PrincipalDep) -> TopicListOut:
    """User topics and their queue counts (with auth on: those the token has a right on)."""
    topics = await run_in_threadpool(broker.store.topics)
    return TopicListOut(
        topics=[
            TopicOut(topic=name, queues=queues)
            for name, queues in sorted(topics.items())
            if principal is None or principal.may_any(name)
        ]
    )


def _describe(store: MessageStore, topic: str) -> TopicOut:
    validate_topic(topic, allow_system=True)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    offsets = store.queue_offsets(topic)
    return TopicOut(
        topic=topic,
        queues=len(offsets),
        queue_offsets=[
            QueueOffsetsOut(queue_id=queue_id, min_offset=low, max_offset=high)
            for queue_id, (low, high) in sorted(offsets.items())
        ],
    )


@router.get("/{topic}", response_model=TopicOut)
async def describe_topic(topic: AnyTopicPath, broker: BrokerDep, principal: PrincipalDep) -> TopicOut:
    """The topic's queues with each queue's min and max offset (max = next offset to write)."""
    if principal is not None and not principal.may_any(topic):
        authorize(principal, Right.CONSUME, topic)
    return await run_in_threadpool(_describe, broker.store, topic)


def _delete(store: MessageStore, topic: str) -> None:
    validate_topic(topic)
    if not store.delete_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")


@router.delete("/{topic}", status_code=204, response_class=Response)
async def delete_topic(topic: TopicPath, broker: BrokerDep, principal: PrincipalDep) -> None:
    """Delete the topic, its queues and group offsets (CommitLog bytes age out by retention)."""
    authorize(principal, Right.ADMIN, topic)
    await run_in_threadpool(_delete, broker.store, topic)
