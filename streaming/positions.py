"""Where a ``sparkmq`` read starts and ends: Spark's Kafka position options, parsed.

Starting: ``startingOffsets`` (``earliest`` / ``latest`` / JSON ``{"orders": {"0": 12}}`` with
``-2`` = earliest, ``-1`` = latest), ``startingTimestamp`` (one store time for every queue),
``startingOffsetsByTimestamp`` (JSON, per queue). Ending (batch reads): ``endingOffsets``,
``endingTimestamp``, ``endingOffsetsByTimestamp``. At most one of each group: Kafka silently
prefers one, sparkmq refuses the contradiction. A timestamp resolves to the leftmost offset
whose store time is ``>=`` it. Queues absent from a JSON start at earliest and end at latest.

Pure: strings in, frozen values out, :class:`InvalidSourceOption` naming the option.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from store import InvalidArgument

#: Kafka-style sentinels inside JSON offsets: -2 = earliest, -1 = latest.
EARLIEST_SENTINEL = -2
LATEST_SENTINEL = -1

#: ``{"topic": {queue_id: value}}`` after parsing the Kafka-style JSON.
PerQueue = dict[str, dict[int, int]]


class InvalidSourceOption(InvalidArgument):
    """An option of ``spark.read(Stream).format("sparkmq")`` is missing, malformed, contradictory
    or cannot apply. The message always starts with the option's name as the docs spell it."""

    code = "invalid_source_option"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"sparkmq option '{option}': {problem}")
        self.option = option


class StartKind(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    #: Explicit per-queue offsets (JSON ``{"topic": {"queueId": offset}}``).
    OFFSETS = "offsets"
    #: One store timestamp for every queue.
    TIMESTAMP = "timestamp"
    #: Per-queue store timestamps (JSON ``{"topic": {"queueId": ms}}``).
    TIMESTAMPS = "timestamps"


class EndKind(enum.Enum):
    LATEST = "latest"
    OFFSETS = "offsets"
    #: One store timestamp for every queue.
    TIMESTAMP = "timestamp"
    #: Per-queue store timestamps (``endingOffsetsByTimestamp``).
    TIMESTAMPS = "timestamps"


@dataclass(frozen=True)
class StartingPosition:
    kind: StartKind
    #: For OFFSETS / TIMESTAMPS; queues absent from it start at ``earliest``.
    per_queue: PerQueue = field(default_factory=dict)
    #: For TIMESTAMP: epoch milliseconds.
    timestamp_ms: int = 0


@dataclass(frozen=True)
class EndingPosition:
    kind: EndKind
    #: For OFFSETS (exclusive ends) / TIMESTAMPS; queues absent from it end at ``latest``.
    per_queue: PerQueue = field(default_factory=dict)
    #: For TIMESTAMP: rows with store time < this (epoch ms) are read.
    timestamp_ms: int = 0

    @property
    def option(self) -> str:
        """The option that set this end (for messages)."""
        return {
            EndKind.TIMESTAMP: "endingTimestamp",
            EndKind.TIMESTAMPS: "endingOffsetsByTimestamp",
        }.get(self.kind, "endingOffsets")


#: Is ``(topic, queue_id)`` part of the subscription (``queue_id`` None: any queue)?
Admits = Callable[[str, "int | None"], bool]


def parse_starting(lower: Mapping[str, str], admits: Admits) -> StartingPosition | None:
    names = ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp")
    if len([n for n in names if n in lower]) > 1:
        raise InvalidSourceOption(
            "startingOffsets",
            "set only one of startingOffsets, startingTimestamp, startingOffsetsByTimestamp",
        )
    if "startingtimestamp" in lower:
        return StartingPosition(StartKind.TIMESTAMP, timestamp_ms=timestamp(lower, "startingTimestamp"))
    if "startingoffsetsbytimestamp" in lower:
        per_queue = _per_queue_timestamps(lower, "startingOffsetsByTimestamp", admits)
        return StartingPosition(StartKind.TIMESTAMPS, per_queue=per_queue)
    raw = lower.get("startingoffsets")
    if raw is None:
        return None
    text = raw.strip().lower()
    if text == "earliest":
        return StartingPosition(StartKind.EARLIEST)
    if text == "latest":
        return StartingPosition(StartKind.LATEST)
    per_queue = per_queue_json(raw, "startingOffsets", admits)
    _check_offsets(per_queue, "startingOffsets")
    return StartingPosition(StartKind.OFFSETS, per_queue=per_queue)


def parse_ending(lower: Mapping[str, str], admits: Admits) -> EndingPosition | None:
    names = ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    if len([n for n in names if n in lower]) > 1:
        raise InvalidSourceOption(
            "endingOffsets", "set only one of endingOffsets, endingTimestamp, endingOffsetsByTimestamp"
        )
    if "endingtimestamp" in lower:
        return EndingPosition(EndKind.TIMESTAMP, timestamp_ms=timestamp(lower, "endingTimestamp"))
    if "endingoffsetsbytimestamp" in lower:
        per_queue = _per_queue_timestamps(lower, "endingOffsetsByTimestamp", admits)
        return EndingPosition(EndKind.TIMESTAMPS, per_queue=per_queue)
    raw = lower.get("endingoffsets")
    if raw is None:
        return None
    if raw.strip().lower() == "latest":
        return EndingPosition(EndKind.LATEST)
    if raw.strip().lower() == "earliest":
        raise InvalidSourceOption("endingOffsets", "'earliest' is not allowed; use 'latest' or JSON")
    per_queue = per_queue_json(raw, "endingOffsets", admits)
    _check_offsets(per_queue, "endingOffsets")
    return EndingPosition(EndKind.OFFSETS, per_queue=per_queue)


def _per_queue_timestamps(lower: Mapping[str, str], name: str, admits: Admits) -> PerQueue:
    per_queue = per_queue_json(lower[name.lower()], name, admits)
    for queues in per_queue.values():
        for ts in queues.values():
            if ts < 0:
                raise InvalidSourceOption(name, f"timestamps must be >= 0, got {ts}")
    return per_queue


def per_queue_json(raw: str, name: str, admits: Admits) -> PerQueue:
    """``{"topic": {"queueId": number}}``; every topic and queue must be subscribed."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidSourceOption(name, f'expected JSON like {{"orders": {{"0": 12}}}}: {exc}') from None
    if not isinstance(value, dict):
        raise InvalidSourceOption(name, 'expected a JSON object like {"orders": {"0": 12}}')
    result: PerQueue = {}
    for topic, queues in value.items():
        if not admits(topic, None):
            raise InvalidSourceOption(name, f"topic {topic!r} is not among the subscribed topics")
        if not isinstance(queues, dict):
            raise InvalidSourceOption(
                name, f"value for topic {topic!r} must be an object of queueId -> number"
            )
        parsed: dict[int, int] = {}
        for queue_id, number in queues.items():
            if not str(queue_id).isdigit():
                raise InvalidSourceOption(
                    name, f"queue id {queue_id!r} of topic {topic!r} is not a non-negative integer"
                )
            if not admits(topic, int(queue_id)):
                raise InvalidSourceOption(name, f"queue {topic}/{queue_id} is not among the assigned queues")
            if isinstance(number, bool) or not isinstance(number, int):
                raise InvalidSourceOption(
                    name, f"value for {topic}/{queue_id} must be an integer, got {number!r}"
                )
            parsed[int(queue_id)] = number
        result[topic] = parsed
    return result


def _check_offsets(per_queue: PerQueue, name: str) -> None:
    for topic, queues in per_queue.items():
        for queue_id, offset in queues.items():
            if offset < EARLIEST_SENTINEL:
                raise InvalidSourceOption(
                    name,
                    f"offset for {topic}/{queue_id} must be >= 0, -2 (earliest) or -1 (latest), got {offset}",
                )


def timestamp(lower: Mapping[str, str], name: str) -> int:
    raw = lower[name.lower()].strip()
    if not raw.isdigit():
        raise InvalidSourceOption(name, f"expected epoch milliseconds (a non-negative integer), got {raw!r}")
    return int(raw)
