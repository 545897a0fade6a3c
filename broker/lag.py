"""Consumer lag in messages and in time: per queue, how far a group's committed offset is
behind, and how long the oldest unconsumed message has waited (one message read per lagging
queue). Blocking store reads: callers use a worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from store import MessageStore


def stored_at(store: MessageStore, topic: str, queue_id: int, offset: int) -> int | None:
    """Store timestamp (ms) of the message at ``offset``, or ``None`` when there is none."""
    result = store.get_messages(topic, queue_id, offset, 1)
    return result.messages[0].store_timestamp_ms if result.messages else None


def lag_seconds(store: MessageStore, topic: str, queue_id: int, committed: int, now_ms: int) -> float | None:
    """How long the oldest unconsumed message has waited: now - its store time (``None`` when
    the group is caught up). A queue never committed counts from its min offset."""
    low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
    start = max(committed, low)
    if start >= high:
        return None
    stamp = stored_at(store, topic, queue_id, start)
    return None if stamp is None else max(0.0, (now_ms - stamp) / 1000)


@dataclass(frozen=True)
class GroupQueueRow:
    topic: str
    queue_id: int
    #: -1 where the group never committed.
    committed: int
    max_offset: int
    lag: int
    lag_seconds: float | None


def group_topic_rows(store: MessageStore, group: str, topic: str, now_ms: int) -> list[GroupQueueRow]:
    committed = store.committed_offsets(group, topic)
    lags = store.lag(group, topic)
    rows = []
    for queue_id in range(store.queue_count(topic)):
        offset = committed.get(queue_id, -1)
        lag = lags.get(queue_id, 0)
        seconds = lag_seconds(store, topic, queue_id, offset, now_ms) if lag else None
        rows.append(GroupQueueRow(topic, queue_id, offset, store.max_offset(topic, queue_id), lag, seconds))
    return rows
