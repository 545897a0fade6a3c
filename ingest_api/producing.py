"""Turning validated produce requests into store writes.

Runs in a worker thread (every method blocks on the store). Queue choice: an explicit
``queue_id``; else a ``sharding_key`` hashed like RocketMQ's ``SelectMessageQueueByHash``
(``abs(key.hashCode()) % queues``, so one key always lands on one queue and keeps its order);
else ``None``, which lets the store go round robin.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.batches import ArrowBatch, check_body_sizes
from ingest_api.errors import ApiError
from ingest_api.schemas import ProduceIn
from store.errors import UnknownTopic
from store.java_hash import java_string_hash, java_string_hashes
from store.names import validate_topic
from store.types import Message, PutResult

if TYPE_CHECKING:
    from store.message_store import MessageStore


def sharding_queue(key: str, queue_count: int) -> int:
    """RocketMQ ``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)``."""
    return abs(java_string_hash(key)) % queue_count


def sharding_queues(keys: Sequence[str], queue_count: int) -> npt.NDArray[np.int32]:
    hashes = java_string_hashes(keys).astype(np.int64)
    return (np.abs(hashes) % queue_count).astype(np.int32)


def ensure_topic(store: MessageStore, topic: str) -> int:
    """Queue count of ``topic``, creating it when auto-creation is on; else :class:`UnknownTopic`."""
    validate_topic(topic)
    if not store.has_topic(topic):
        if not store.config.auto_create_topics:
            raise UnknownTopic(f"topic {topic!r} does not exist (auto-creation is off)")
        return store.create_topic(topic)
    return store.queue_count(topic)


def _unknown_queue(queue_id: int, topic: str, queue_count: int, index: int | None = None) -> ApiError:
    where = f"messages[{index}]: " if index is not None else ""
    return ApiError(
        400,
        "unknown_queue",
        f"{where}queue_id {queue_id} is outside topic {topic!r}'s {queue_count} queues",
        index=index,
    )


def _too_large(size: int, limit: int, index: int | None = None) -> ApiError:
    where = f"messages[{index}]: " if index is not None else ""
    return ApiError(
        413, "message_too_large", f"{where}body is {size} bytes; the limit is {limit}", index=index
    )


def _entry_message(
    topic: str, entry: ProduceIn, queue_count: int, max_body: int, index: int | None
) -> Message:
    queue_id = entry.queue_id
    if queue_id is not None and queue_id >= queue_count:
        raise _unknown_queue(queue_id, topic, queue_count, index)
    if entry.sharding_key is not None:
        queue_id = sharding_queue(entry.sharding_key, queue_count)
    message = entry.to_message(topic, queue_id)
    if len(message.body) > max_body:
        raise _too_large(len(message.body), max_body, index)
    return message


def put_one(store: MessageStore, topic: str, entry: ProduceIn) -> PutResult:
    queue_count = ensure_topic(store, topic)
    message = _entry_message(topic, entry, queue_count, store.config.max_message_size_bytes, None)
    return store.put_message(message)


def put_entries(store: MessageStore, topic: str, entries: Sequence[ProduceIn]) -> list[PutResult]:
    """All-or-nothing: every entry is checked before the store's atomic ``put_messages``."""
    queue_count = ensure_topic(store, topic)
    max_body = store.config.max_message_size_bytes
    messages = [_entry_message(topic, e, queue_count, max_body, i) for i, e in enumerate(entries)]
    return store.put_messages(messages)


def arrow_queue_ids(topic: str, batch: ArrowBatch, queue_count: int) -> npt.NDArray[np.int32] | None:
    """Per-row queue ids (-1 = round robin), or None when every row is round robin."""
    if batch.queue_id is None and batch.sharding_key is None:
        return None
    queue_ids = np.full(len(batch), -1, dtype=np.int32)
    if batch.queue_id is not None:
        explicit = pc.fill_null(batch.queue_id, -1).to_numpy(zero_copy_only=False).astype(np.int32)
        too_big = np.flatnonzero(explicit >= queue_count)
        if len(too_big):
            row = int(too_big[0])
            raise _unknown_queue(int(explicit[row]), topic, queue_count, row)
        queue_ids = explicit
    if batch.sharding_key is not None:
        rows = np.flatnonzero(pc.is_valid(batch.sharding_key).to_numpy(zero_copy_only=False))
        if len(rows):
            keys = pc.take(batch.sharding_key, pa.array(rows)).to_pylist()
            queue_ids[rows] = sharding_queues(keys, queue_count)
    if (queue_ids < 0).all():
        return None
    return queue_ids


def arrow_messages(topic: str, batch: ArrowBatch, queue_ids: npt.NDArray[np.int32] | None) -> list[Message]:
    """Row-wise :class:`Message` objects (the path used when a column feature needs it)."""
    n = len(batch)
    bodies = batch.body.to_pylist()
    tags = batch.tags.to_pylist() if batch.tags is not None else [None] * n
    keys = batch.keys.to_pylist() if batch.keys is not None else [None] * n
    props = batch.properties.to_pylist() if batch.properties is not None else [None] * n
    delays = batch.delay_level.to_pylist() if batch.delay_level is not None else [None] * n
    qids = queue_ids.tolist() if queue_ids is not None else [-1] * n
    return [
        Message(
            topic=topic,
            body=bodies[i],
            tags=tags[i],
            keys=tuple(keys[i] or ()),
            properties=dict(props[i] or ()),
            queue_id=None if qids[i] < 0 else qids[i],
            delay_level=delays[i] or 0,
        )
        for i in range(n)
    ]


def put_arrow(store: MessageStore, topic: str, batch: ArrowBatch) -> list[PutResult]:
    queue_count = ensure_topic(store, topic)
    check_body_sizes(pc.binary_length(batch.body), store.config.max_message_size_bytes)
    queue_ids = arrow_queue_ids(topic, batch, queue_count)
    return store.put_messages(arrow_messages(topic, batch, queue_ids))
