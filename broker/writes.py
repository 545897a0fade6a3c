"""Where a write for an explicit queue is taken: here, or refused because the queue lives on
another broker (doors whose clients pick the queue themselves from a route, like RocketMQ's).

:func:`write_queue_count` is the topic's queue count when this broker takes a write to
``queue_id``: a lone broker creates an unknown topic (auto-create, :func:`broker.produce.topic_queue_count`);
a cluster member creates it in the cluster's routes, and refuses (:class:`BrokerError` 421
``not_owner``, naming the owner) a queue another broker owns, so the client refreshes its
route. A queue id outside the topic is left to :func:`broker.produce.place_message` (409).
A write at a slave is refused by the store (``store.NotMaster``).
"""

from __future__ import annotations

from broker.errors import BrokerError
from broker.produce import topic_queue_count
from broker.reads import local_ready
from broker.state import Broker
from broker.threads import run_blocking
from store import validate_topic


async def write_queue_count(broker: Broker, topic: str, queue_id: int) -> int:
    """The topic's queue count when this broker takes a write to ``queue_id`` (see the module
    docstring); raises :class:`BrokerError` 421 for a queue another broker owns."""
    node = broker.cluster
    if node is None:
        return await topic_queue_count(broker, topic)
    placement = node.view.placement(topic)
    if placement is None:
        placement = await run_blocking(node.ensure_topic, topic)
    count = placement.queue_count
    if 0 <= queue_id < count:
        owner = placement.owners[queue_id]
        if owner != node.name:
            raise BrokerError(
                421,
                "not_owner",
                f"queue {queue_id} of {topic!r} lives on broker {owner}, not {node.name}: refresh the route",
                broker=owner,
            )
        await local_ready(broker, {topic: placement})
    return count


async def create_or_grow_topic(broker: Broker, topic: str, queues: int) -> int:
    """Create ``topic`` with ``queues`` queues or grow it (queues never shrink): on this lone
    broker, or in the cluster's routes (new queue ids round robin over the live brokers).
    Returns the topic's queue count."""
    validate_topic(topic)
    node = broker.cluster
    if node is None:
        return await run_blocking(broker.store.create_topic, topic, queues)
    placement = await run_blocking(node.create_or_grow_topic, topic, queues, None)
    return placement.queue_count
