"""Which store topics Kafka may see, and the blocking lookups shared by several handlers."""

from __future__ import annotations

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
