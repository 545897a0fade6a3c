"""Spark offsets of the ``sparkmq`` source and how micro-batches are planned over them.

An offset is a JSON object ``{"<topic>/<queueId>": next_offset}``: for every ConsumeQueue the
logical index of the next message to read (RocketMQ's "consumer offset"). Spark compares
offsets as JSON *strings*, so keys are always ``str`` and always in one fixed order
(:func:`normalize`: by topic, then numeric queue id); values are plain ``int``.

Everything here is pure: heads are passed in, nothing is read from a store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: ``{"topic/queueId": next_offset}``, keys in :func:`normalize` order.
Offsets = dict[str, int]


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Messages ``[start, end)`` of one ConsumeQueue (logical offsets)."""

    topic: str
    queue_id: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def queue_key(topic: str, queue_id: int) -> str:
    return f"{topic}/{queue_id}"


def split_key(key: str) -> tuple[str, int]:
    """Inverse of :func:`queue_key`. Topic names never contain ``/``."""
    topic, _, queue_id = key.rpartition("/")
    if not topic or not queue_id.isdigit():
        raise ValueError(f"malformed sparkmq offset key {key!r} (expected 'topic/queueId')")
    return topic, int(queue_id)


#: The source's clock (``clockIntervalMs``): a pseudo queue whose offset is the wall clock in
#: intervals, so that Spark sees new offsets, and runs a batch, once per interval. It is never
#: read, mirrored or planned. No topic has this name (``~`` is not allowed in one).
CLOCK_KEY = "~clock/0"


def without_clock(offsets: Mapping[str, int]) -> dict[str, int]:
    return {key: value for key, value in offsets.items() if key != CLOCK_KEY}


def _order(key: str) -> tuple[str, int]:
    return split_key(key)


def normalize(offsets: Mapping[str, int]) -> Offsets:
    """The canonical form: string keys sorted by (topic, queue id), int values."""
    return {key: int(offsets[key]) for key in sorted(offsets, key=_order)}


def fair_share_end(start: Mapping[str, int], target: Mapping[str, int], max_messages: int | None) -> Offsets:
    """End offsets of the next batch: ``target`` capped at ``max_messages`` in total.

    Like Spark's Kafka source, the budget is split across queues in proportion to what each
    still has to read; unlike it, the sum is exact: shares are floored and the remaining
    units go first to queues whose share rounded down to nothing (so a queue with a tiny
    backlog is not starved behind a big one), then to the largest fractional parts (ties by
    key order). A batch never exceeds ``max_messages`` and always reads ``min(limit, backlog)``.

    Keys only in ``start`` keep their start; keys only in ``target`` must not occur (the
    caller registers new queues first). A queue whose target is below its start (data
    loss, handled by the caller) keeps its start.
    """
    remaining = {key: max(0, target.get(key, pos) - pos) for key, pos in start.items()}
    total = sum(remaining.values())
    end = {key: pos + remaining[key] for key, pos in start.items()}
    if max_messages is None or total <= max_messages:
        return normalize(end)
    floors: dict[str, int] = {}
    priorities: list[tuple[bool, float, int, str]] = []
    for rank, key in enumerate(normalize(start)):
        exact = max_messages * remaining[key] / total
        floors[key] = min(remaining[key], int(exact))
        starved = floors[key] == 0 and remaining[key] > 0
        priorities.append((starved, exact - int(exact), -rank, key))
    leftover = max_messages - sum(floors.values())
    for *_, key in sorted(priorities, reverse=True):
        if leftover <= 0:
            break
        if floors[key] < remaining[key]:
            floors[key] += 1
            leftover -= 1
    return normalize({key: start[key] + floors[key] for key in start})


def ranges_between(start: Mapping[str, int], end: Mapping[str, int]) -> list[QueueRange]:
    """Non-empty ranges ``[start, end)`` in key order. A key missing from ``start`` is empty.

    (The stream reader registers a new queue at its earliest offset in one batch before it
    reads from it, so ``start`` always has every key that has something to read and a
    replay of a logged batch yields exactly the same ranges.)
    """
    ranges = []
    for key, stop in normalize(end).items():
        begin = start.get(key, stop)
        if stop > begin:
            topic, queue_id = split_key(key)
            ranges.append(QueueRange(topic, queue_id, begin, stop))
    return ranges


def group_ranges(ranges: Iterable[QueueRange], num_partitions: int) -> list[tuple[QueueRange, ...]]:
    """Pack queue ranges into at most ``num_partitions`` groups of about equal message count.

    Spark pays ~35-60 ms per task, so many ConsumeQueues share a partition. Ranges are taken
    in key order and cut at group boundaries (a big queue may be split across groups), so
    every group but the last holds ``ceil(total / n)`` messages. Deterministic.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    items = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in items)
    if total == 0:
        return []
    per_group = -(-total // min(num_partitions, total))
    groups: list[tuple[QueueRange, ...]] = []
    current: list[QueueRange] = []
    room = per_group
    for item in items:
        begin = item.start
        while begin < item.end:
            take = min(room, item.end - begin)
            current.append(QueueRange(item.topic, item.queue_id, begin, begin + take))
            begin += take
            room -= take
            if room == 0:
                groups.append(tuple(current))
                current, room = [], per_group
    if current:
        groups.append(tuple(current))
    return groups
