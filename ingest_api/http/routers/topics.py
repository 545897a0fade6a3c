"""``/topics``: create or grow, list, describe, delete.

In a cluster a topic is one queue-id space over the brokers: creating or growing it writes its
placement to ZooKeeper (any broker may be asked), describing it asks each queue's owner for its
offsets, deleting it removes its route (each owner then drops its queues).
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request, Response

from broker.auth import Right, authorize, may_any
from broker.errors import BrokerError
from broker.peers import PeerUnavailable, passed_headers
from broker.routing import FORWARDED_HEADER
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.schemas import ErrorOut, QueueOffsetsOut, TopicIn, TopicListOut, TopicOut
from ingest_api.params import AnyTopicPath, TopicPath
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
    responses={
        200: {"model": TopicOut, "description": "The topic existed (and may have grown)."},
        409: {
            "model": ErrorOut,
            "description": "'brokers' names brokers that cannot take queues (unknown, down, or no cluster).",
        },
    },
)
async def create_or_grow_topic(
    topic: TopicPath, spec: TopicIn, broker: BrokerDep, principal: PrincipalDep, response: Response
) -> TopicOut:
    """Create a topic with ``queues`` queues, or grow an existing one (queues never shrink).
    In a cluster the new queue ids go round robin over the live brokers, or to ``brokers``."""
    authorize(principal, Right.ADMIN, topic)
    node = broker.cluster
    if node is None:
        if spec.brokers is not None:
            raise BrokerError(
                409, "not_a_cluster", "'brokers' places queues in a cluster; this broker runs alone"
            )
        existed, queues = await run_blocking(_create_or_grow, broker.store, topic, spec.queues)
    else:
        validate_topic(topic)
        existed = node.view.placement(topic) is not None
        placement = await run_blocking(node.create_or_grow_topic, topic, spec.queues, spec.brokers)
        queues = placement.queue_count
    if existed:
        response.status_code = 200
    return TopicOut(topic=topic, queues=queues)


@router.get("", response_model=TopicListOut)
async def list_topics(broker: BrokerDep, principal: PrincipalDep) -> TopicListOut:
    """User topics and their queue counts (with auth on: those the token has a right on)."""
    if broker.cluster is not None:
        topics = {name: p.queue_count for name, p in broker.cluster.view.topics.items()}
    else:
        topics = await run_blocking(broker.store.topics)
    return TopicListOut(
        topics=[
            TopicOut(topic=name, queues=queues)
            for name, queues in sorted(topics.items())
            if may_any(principal, name)
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
            QueueOffsetsOut(queue_id=queue_id, min_offset=low, max_offset=high, broker=None, available=None)
            for queue_id, (low, high) in sorted(offsets.items())
        ],
    )


@router.get("/{topic}", response_model=TopicOut, response_model_exclude_none=True)
async def describe_topic(
    topic: AnyTopicPath, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> TopicOut:
    """The topic's queues with each queue's min and max offset (max = next offset to write).
    In a cluster each queue's offsets come from its owner, named in ``broker``."""
    if principal is not None and not may_any(principal, topic):
        authorize(principal, Right.CONSUME, topic)
    if broker.cluster is None or FORWARDED_HEADER in request.headers:
        return await run_blocking(_describe, broker.store, topic)
    return await _describe_cluster(broker, topic, passed_headers(request.headers))


async def _describe_cluster(broker: Broker, topic: str, headers: dict[str, str]) -> TopicOut:
    node = broker.cluster
    assert node is not None
    validate_topic(topic, allow_system=True)
    placement = node.view.placement(topic)
    if placement is None:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    owners = sorted(set(placement.owners))

    async def offsets_of(owner: str) -> dict[int, tuple[int, int]] | None:
        if owner == node.name and node.serving:
            local = await run_blocking(_describe, broker.store, topic)
            return {q.queue_id: (q.min_offset, q.max_offset) for q in local.queue_offsets or ()}
        try:
            answer = await broker.peers.request(
                node.view.master_of(owner), owner, "GET", f"/topics/{topic}", headers=headers
            )
        except PeerUnavailable:
            return None
        if answer.status_code != 200:
            return None
        body: dict[str, Any] = answer.json()
        return {q["queue_id"]: (q["min_offset"], q["max_offset"]) for q in body.get("queue_offsets") or ()}

    found = dict(zip(owners, await asyncio.gather(*(offsets_of(o) for o in owners)), strict=True))
    rows = []
    for queue_id, owner in enumerate(placement.owners):
        known = found[owner]
        low, high = (known or {}).get(queue_id, (0, 0))
        rows.append(
            QueueOffsetsOut(
                queue_id=queue_id, min_offset=low, max_offset=high, broker=owner, available=known is not None
            )
        )
    return TopicOut(topic=topic, queues=placement.queue_count, queue_offsets=rows)


def _delete(store: MessageStore, topic: str) -> None:
    validate_topic(topic)
    if not store.delete_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")


@router.delete("/{topic}", status_code=204, response_class=Response)
async def delete_topic(topic: TopicPath, broker: BrokerDep, principal: PrincipalDep) -> None:
    """Delete the topic, its queues and group offsets (CommitLog bytes age out by retention).
    In a cluster the route goes, and every owner deletes its queues when it sees that."""
    authorize(principal, Right.ADMIN, topic)
    if broker.cluster is None:
        await run_blocking(_delete, broker.store, topic)
        return
    validate_topic(topic)
    if not await run_blocking(broker.cluster.delete_topic, topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
