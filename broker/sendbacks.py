"""A consumer's send-back on this broker, for any door: the group's settings, this broker's
queues of the group's retry and DLQ topics in a cluster, then :func:`broker.retries.send_back_many`
(the retry ladder to ``%RETRY%group``, then ``%DLQ%group``, applied by the retry resolver).

:func:`send_back_here` is what the HTTP door's ``messages:sendBack`` does for the messages this
broker holds; RocketMQ's CONSUMER_SEND_MSG_BACK calls it with ``register_group=True``: a group
RocketMQ clients consume is known by its heartbeats, not by ``PUT /groups/{group}``, so a
send-back before its first offset commit registers it with the default settings (RocketMQ's
``autoCreateSubscriptionGroup``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from broker.errors import BrokerError
from broker.retries import GroupConfigs, OwnQueues, SendBack, SendBackItem, send_back_many
from broker.state import Broker
from broker.threads import run_blocking
from store import ProducerRef, retry_topic


def group_configs(broker: Broker) -> GroupConfigs:
    """The broker's consumer group settings; 503 when it runs without them."""
    configs = getattr(broker.operators, "group_configs", None)
    if configs is None:
        raise BrokerError(503, "retry_unavailable", "this broker has no group configuration")
    assert isinstance(configs, GroupConfigs)
    return configs


def own_retry_queues(broker: Broker) -> OwnQueues | None:
    """In a cluster: this broker's queues of a retry or DLQ topic, created locally; else None."""
    node = broker.cluster
    if node is None:
        return None

    def own_queues(topic: str, count: int) -> tuple[int, ...]:
        mine = node.own_queues(topic, count)
        placement = node.view.placement(topic)
        broker.local_topics.ensure_local(topic, placement.queue_count if placement else max(mine) + 1)
        return mine

    return own_queues


async def send_back_here(
    broker: Broker,
    group: str,
    items: Sequence[SendBackItem],
    *,
    producer: ProducerRef | None = None,
    register_group: bool = False,
) -> list[SendBack]:
    """Store the send-back requests of messages this broker holds (one atomic append); raises
    ``broker.retries.UnknownMessage`` / ``UnknownGroup`` / ``store.UnknownTopic``."""
    configs = group_configs(broker)
    if register_group and configs.get(group) is None and group not in broker.store.groups():
        await run_blocking(configs.put, group, None, None)
    call = partial(
        send_back_many,
        broker.store,
        configs,
        group,
        list(items),
        producer=producer,
        own_queues=own_retry_queues(broker),
    )
    return await run_blocking(call)


def ensure_retry_topic(broker: Broker, group: str) -> int:
    """The queue count of ``%RETRY%group`` on this lone broker, created with the group's
    ``retry_queues`` (default 1) when missing: RocketMQ creates it when a consumer of the group
    first heartbeats, so push consumers find its route before the first send-back (worker
    thread). A cluster member routes it from ZooKeeper instead (placed on first send-back)."""
    store = broker.store
    name = retry_topic(group)
    if not store.has_topic(name):
        settings = group_configs(broker).get(group) or {}
        store.create_topic(name, settings.get("retry_queues", 1))
    return store.queue_count(name)
