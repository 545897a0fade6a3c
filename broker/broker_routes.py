"""A topic's route per broker name, for doors whose clients address queues per broker
(RocketMQ's NameServer routes: each broker name with its own queue numbers ``0..k-1``).

In a cluster a topic's queue ids are global (``TopicPlacement.owners[queue_id]`` names the
broker). A RocketMQ client sees, per broker name, ``k`` queues numbered ``0..k-1``: the
``i``-th is that broker's ``i``-th queue id of the topic in ascending order.
:func:`queue_ids_here` gives this broker's list (``None`` on a lone broker: the ids are the
topic's own) and :func:`global_queue_id` maps a client's queue number onto it.
:func:`topic_broker_routes` gives every broker name's queue ids with its master and slaves
(members in the order of their ids), from the routes in ZooKeeper: it changes when a master
fails over. An unknown topic is created in the routes when the cluster auto-creates topics.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.state import Broker
from broker.threads import run_blocking
from cluster import MemberInfo, TopicPlacement, placeable


@dataclass(frozen=True, slots=True)
class BrokerRoute:
    """One broker name's part of a topic: its queue ids (ascending) and its live members."""

    broker_name: str
    queue_ids: tuple[int, ...]
    master: MemberInfo | None
    slaves: tuple[MemberInfo, ...]


async def _placement(broker: Broker, topic: str, create: bool) -> TopicPlacement | None:
    node = broker.cluster
    assert node is not None
    placement = node.view.placement(topic)
    if placement is None and placeable(topic):
        placement = await run_blocking(node.learn_topic, topic)  # created elsewhere just now
    if placement is None and create and node.config.auto_create_topics:
        placement = await run_blocking(node.ensure_topic, topic)
    return placement


async def topic_broker_routes(broker: Broker, topic: str, *, create: bool = True) -> list[BrokerRoute] | None:
    """Each broker name holding queues of ``topic``, by name; ``None`` when the topic has no
    route (or on a lone broker, which answers for itself)."""
    node = broker.cluster
    if node is None:
        return None
    placement = await _placement(broker, topic, create)
    if placement is None:
        return None
    view = node.view
    routes = []
    for name in sorted(set(placement.owners)):
        group = view.group(name)
        master = group.master
        slaves = tuple(sorted((m for m in group.members if m is not master), key=lambda m: m.member_id))
        routes.append(BrokerRoute(name, placement.queues_of(name), master, slaves))
    return routes


def queue_ids_here(broker: Broker, topic: str) -> tuple[int, ...] | None:
    """This broker's queue ids of ``topic`` (ascending); ``None`` on a lone broker or for a
    topic without a route (a system topic local to each broker)."""
    node = broker.cluster
    if node is None:
        return None
    placement = node.view.placement(topic)
    return None if placement is None else placement.queues_of(node.name)


def global_queue_id(broker: Broker, topic: str, queue_number: int) -> int:
    """The topic's queue id of a client's queue number on this broker (the number itself on a
    lone broker); a number past this broker's queues maps past the topic's (refused later as
    outside the topic)."""
    ids = queue_ids_here(broker, topic)
    if ids is None or queue_number < 0:
        return queue_number
    if queue_number < len(ids):
        return ids[queue_number]
    placement = broker.cluster.view.placement(topic) if broker.cluster is not None else None
    return (placement.queue_count if placement is not None else len(ids)) + queue_number


def queue_number_here(broker: Broker, topic: str, queue_id: int) -> int:
    """The client's queue number of the topic's ``queue_id`` on this broker (inverse of
    :func:`global_queue_id`; the id itself when this broker does not hold it)."""
    ids = queue_ids_here(broker, topic)
    if ids is None or queue_id not in ids:
        return queue_id
    return ids.index(queue_id)
