"""Which store topics Kafka may see, and the blocking lookups shared by several handlers.

On a lone broker every partition is served here. In a cluster (``ctx.cluster``) the routes
say where a partition lives: :func:`served_partition_error` answers NOT_LEADER_OR_FOLLOWER for
a partition another broker owns, and :func:`known_partition_error` asks only whether the
partition exists anywhere in the cluster.
"""

from __future__ import annotations

from typing import Any

from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.store_port import KafkaStore
from store import InvalidArgument, StoreError, is_system_topic


def visible_topics(store: KafkaStore) -> dict[str, int]:
    """User topics -> partition count; system topics (delay, half messages) never show."""
    return {name: count for name, count in store.topics().items() if not is_system_topic(name)}


def partition_count(store: KafkaStore, topic: str) -> int | None:
    """Partitions of a Kafka-visible topic, ``None`` if it does not exist (blocking)."""
    if is_system_topic(topic) or not store.has_topic(topic):
        return None
    return store.queue_count(topic)


def partition_error(store: KafkaStore, topic: str, partition: int) -> ErrorCode:
    count = partition_count(store, topic)
    if count is None or not 0 <= partition < count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def routed_partition_count(ctx: GatewayContext, topic: str) -> int | None:
    """Partitions of a Kafka-visible topic in the whole cluster (the store's on a lone broker)."""
    link = ctx.cluster
    if link is None:
        return partition_count(ctx.store, topic)
    placement = None if is_system_topic(topic) else link.placement(topic)
    return None if placement is None else placement.queue_count


def known_partition_error(ctx: GatewayContext, topic: str, partition: int) -> ErrorCode:
    """Blocking: NONE when the partition exists (anywhere in the cluster), else 3."""
    count = routed_partition_count(ctx, topic)
    if count is None or not 0 <= partition < count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NONE


def served_partition_error(ctx: GatewayContext, topic: str, partition: int) -> ErrorCode:
    """Blocking: NONE when this broker serves the partition's data (Produce, Fetch,
    ListOffsets); NOT_LEADER_OR_FOLLOWER when another broker owns it. In a cluster the local
    topic is created on the way when the route watch has not done it yet."""
    link = ctx.cluster
    if link is None:
        return partition_error(ctx.store, topic, partition)
    placement = None if is_system_topic(topic) else link.placement(topic)
    if placement is None or not 0 <= partition < placement.queue_count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if placement.owners[partition] != link.me:
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    store = ctx.store
    if not store.has_topic(topic) or store.queue_count(topic) < placement.queue_count:
        link.ensure_local(topic, placement.queue_count)
    return ErrorCode.NONE


def ensure_topic(store: KafkaStore, topic: str, auto_create: bool) -> tuple[ErrorCode, int]:
    """(error, partitions) for Metadata: optionally auto-creates a missing topic."""
    if is_system_topic(topic):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0
    count = partition_count(store, topic)
    if count is not None:
        return ErrorCode.NONE, count
    if not (auto_create and bool(getattr(store.config, "auto_create_topics", False))):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0
    try:
        return ErrorCode.NONE, store.create_topic(topic)
    except InvalidArgument:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, 0
    except StoreError:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0


def current_leader(ctx: GatewayContext, partition_cls: Any, topic: str, partition: int) -> Any:
    """KIP-951's ``CurrentLeader`` of a NOT_LEADER_OR_FOLLOWER answer (leader -1 when unknown)."""
    node = None if ctx.cluster is None else ctx.cluster.leader(topic, partition)
    return partition_cls.LeaderIdAndEpoch(leader_id=node.node_id if node else -1, leader_epoch=0)
