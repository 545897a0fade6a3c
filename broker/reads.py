"""Where a queue is read, in a cluster: at its owner's master, or here.

A queue's messages are read where they are stored. :func:`read_placement` decides, for any door:
``None`` when this broker serves the read (a lone broker; the owner's master; a replica of the
owner asked for a replica read or whose group has no master, reads bounded by the confirm offset),
else the member that does. A door answers the member in its own way (HTTP: ``307`` to the same
path there; RocketMQ: ``suggestWhichBrokerId``). An owner with no live member is
:class:`cluster.QueueUnavailable`.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.state import Broker
from broker.threads import run_blocking
from cluster import MemberInfo, QueueUnavailable, TopicPlacement, placeable


async def read_placement(broker: Broker, topic: str, queue_id: int, replica_asked: bool) -> MemberInfo | None:
    """The member that serves reads of the queue, or ``None`` for this broker (see the module
    docstring). Creates the routed topic's local queues when this broker serves them and the
    route watch has not yet."""
    node = broker.cluster
    if node is None:
        return None
    placement = node.view.placement(topic)
    if placement is None and placeable(topic):
        placement = await run_blocking(node.learn_topic, topic)  # created elsewhere just now
    if placement is None or queue_id >= placement.queue_count:
        return None  # a system topic (local to each broker), or unknown: answered here
    owner = placement.owners[queue_id]
    reads_here = replica_asked or node.view.master_of(node.name) is None
    if owner == node.name and (node.serving or reads_here):
        await local_ready(broker, {topic: placement})
        return None
    master = node.view.master_of(owner)
    if master is None:
        raise QueueUnavailable(
            f"queue {queue_id} of {topic!r} lives on broker {owner}, which is not alive", broker=owner
        )
    return master


async def local_ready(broker: Broker, placements: Mapping[str, TopicPlacement]) -> None:
    """The local store has every routed topic with its full queue count (the route watch may
    not have been applied yet when a forwarded write arrives)."""
    store = broker.store
    missing = [
        (topic, p.queue_count)
        for topic, p in placements.items()
        if not store.has_topic(topic) or store.queue_count(topic) < p.queue_count
    ]
    if missing:
        sync = broker.local_topics

        def create() -> None:
            for topic, count in missing:
                sync.ensure_local(topic, count)

        await run_blocking(create)
