"""Options of the ``sparkmq`` Spark source: parsed once, validated, frozen.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping. This module
turns that mapping into a :class:`SourceOptions` value or raises :class:`InvalidSourceOption`
naming the offending option, so a bad option fails at ``load()`` rather than deep inside a
Spark task. Names follow Spark's Kafka source where the idea is the same (see
``docs/spark_source.md`` for the table).

Pure: no I/O except one ``os.path.isdir`` check for ``path``; no Spark imports.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

from store import (
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    InvalidArgument,
    parse_tag_expression,
    validate_group,
    validate_topic,
)

#: Kafka-style sentinels inside JSON offsets: -2 = earliest, -1 = latest.
EARLIEST_SENTINEL = -2
LATEST_SENTINEL = -1


class InvalidSourceOption(InvalidArgument):
    """An option of ``spark.read(Stream).format("sparkmq")`` is missing, malformed or contradictory.

    The message always starts with the option's name as the user spelled it in the docs.
    """

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
    TIMESTAMP = "timestamp"


#: ``{"topic": {queue_id: value}}`` after parsing the Kafka-style JSON.
PerQueue = dict[str, dict[int, int]]


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
    #: For OFFSETS (exclusive ends); queues absent from it end at ``latest``.
    per_queue: PerQueue = field(default_factory=dict)
    #: For TIMESTAMP: rows with store time < this (epoch ms) are read.
    timestamp_ms: int = 0


@dataclass(frozen=True)
class SourceOptions:
    """Validated options. Picklable (it travels to executors inside the reader)."""

    #: Exactly one of ``endpoint`` (HTTP base URL) and ``path`` (store directory) is the data
    #: plane. ``endpoint`` may accompany ``path``: then only group offsets go over HTTP.
    endpoint: str | None
    path: str | None
    topics: tuple[str, ...]
    #: ``*`` or ``A || B``.
    tags: str
    #: ``None`` means "the default for the mode" (latest for streams, earliest for batch).
    starting: StartingPosition | None
    ending: EndingPosition | None
    max_messages_per_trigger: int | None
    min_partitions: int | None
    group: str | None
    fail_on_data_loss: bool
    #: HTTP timeout for endpoint mode, seconds.
    request_timeout_s: float
    #: Messages per store read / HTTP request inside one queue range.
    read_chunk_messages: int
    #: Shortest time between two queue-head lookups on the driver (Spark polls every ~10 ms
    #: with the default trigger; a head lookup of a store directory costs ~10 ms per topic).
    poll_interval_s: float = 0.05
    #: Shortest time between two group-offset mirror writes while the query is behind; once
    #: it has caught up (nothing left to plan) the latest durable offsets are written at once.
    group_commit_interval_s: float = 1.0
    #: Bearer token for a broker with auth enabled (endpoint mode).
    auth_token: str | None = field(default=None, repr=False)

    @property
    def data_mode(self) -> str:
        return "path" if self.path is not None else "endpoint"

    def validate_for_stream(self) -> SourceOptions:
        if self.ending is not None:
            name = "endingTimestamp" if self.ending.kind is EndKind.TIMESTAMP else "endingOffsets"
            raise InvalidSourceOption(name, "is only valid for batch reads (spark.read), not streams")
        return self

    def validate_for_batch(self) -> SourceOptions:
        if self.max_messages_per_trigger is not None:
            raise InvalidSourceOption(
                "maxMessagesPerTrigger", "is only valid for streams (spark.readStream), not batch reads"
            )
        if self.starting is not None and self.starting.kind is StartKind.LATEST:
            raise InvalidSourceOption("startingOffsets", "'latest' is not allowed for batch reads")
        if self.ending is not None and self.ending.kind is EndKind.OFFSETS:
            for topic, queues in self.ending.per_queue.items():
                for queue_id, offset in queues.items():
                    if offset == EARLIEST_SENTINEL:
                        raise InvalidSourceOption(
                            "endingOffsets", f"earliest (-2) is not allowed (topic {topic} queue {queue_id})"
                        )
        return self


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse Spark's option mapping (keys compared case-insensitively).

    Raises :class:`InvalidSourceOption` for anything missing, malformed or contradictory.
    Mode-specific rules (``endingOffsets`` only for batch, ...) are checked by
    :meth:`SourceOptions.validate_for_stream` / :meth:`SourceOptions.validate_for_batch`.
    """
    lower = {k.lower(): v for k, v in options.items()}
    known = {
        "endpoint", "path", "topic", "topics", "tags", "startingoffsets", "startingtimestamp",
        "startingoffsetsbytimestamp", "endingoffsets", "endingtimestamp", "maxmessagespertrigger",
        "maxoffsetspertrigger", "minpartitions", "group", "failondataloss", "requesttimeoutms",
        "pollintervalms", "readchunkmessages", "authtoken", "groupcommitintervalms", "systemtopics",
        "includeretry",
    }  # fmt: skip
    unknown = sorted(set(lower) - known)
    if unknown:
        raise InvalidSourceOption(unknown[0], "unknown option (see docs/spark_source.md)")

    endpoint, path = _parse_location(lower)
    topics = _parse_topics(lower)
    return SourceOptions(
        endpoint=endpoint,
        path=path,
        topics=topics,
        tags=_parse_tags(lower.get("tags", "*")),
        starting=_parse_starting(lower, topics),
        ending=_parse_ending(lower, topics),
        max_messages_per_trigger=_parse_max_per_trigger(lower),
        min_partitions=_optional_positive_int(lower, "minPartitions"),
        group=_parse_group(lower.get("group")),
        fail_on_data_loss=_parse_bool(lower, "failOnDataLoss", default=True),
        request_timeout_s=(_optional_positive_int(lower, "requestTimeoutMs") or 30_000) / 1000.0,
        read_chunk_messages=_optional_positive_int(lower, "readChunkMessages") or 65_536,
        auth_token=lower.get("authtoken") or None,
        poll_interval_s=_non_negative_int(lower, "pollIntervalMs", default=50) / 1000.0,
        group_commit_interval_s=_non_negative_int(lower, "groupCommitIntervalMs", default=1000) / 1000.0,
    )


# -- pieces ------------------------------------------------------------------------------------


def _parse_location(lower: Mapping[str, str]) -> tuple[str | None, str | None]:
    endpoint = lower.get("endpoint")
    path = lower.get("path")
    if endpoint is None and path is None:
        raise InvalidSourceOption(
            "endpoint", "set either 'endpoint' (broker URL) or 'path' (store directory)"
        )
    if endpoint is not None:
        parsed = urlparse(endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidSourceOption(
                "endpoint", f"must be an http(s) URL like http://127.0.0.1:8080, got {endpoint!r}"
            )
        endpoint = endpoint.rstrip("/")
    if path is not None:
        if not path:
            raise InvalidSourceOption("path", "must not be empty")
        if not os.path.isdir(path):
            raise InvalidSourceOption("path", f"{path!r} is not an existing store directory")
    return endpoint, path


#: System topics the internal ``systemTopics`` option unlocks (the stateful operators' inputs).
READABLE_SYSTEM_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, SENDBACK_TOPIC}
)


def _parse_topics(lower: Mapping[str, str]) -> tuple[str, ...]:
    if "topic" in lower and "topics" in lower:
        raise InvalidSourceOption("topics", "set only one of 'topic' and 'topics'")
    name = "topic" if "topic" in lower else "topics"
    raw = lower.get(name)
    if raw is None:
        raise InvalidSourceOption("topic", "is required (or 'topics', comma-separated)")
    topics = [t.strip() for t in raw.split(",")]
    system = lower.get("systemtopics", "false").strip().lower() == "true"
    for topic in topics:
        try:
            validate_topic(topic, allow_system=system and topic in READABLE_SYSTEM_TOPICS)
        except InvalidArgument as exc:
            raise InvalidSourceOption(name, str(exc)) from None
    retry_group = lower.get("includeretry")
    if retry_group is not None:
        # includeRetry=<group>: the group's retry topic too, so retries arrive in the same stream.
        try:
            validate_group(retry_group.strip())
        except InvalidArgument as exc:
            raise InvalidSourceOption("includeRetry", str(exc)) from None
        topics.append(f"%RETRY%{retry_group.strip()}")
    if len(set(topics)) != len(topics):
        raise InvalidSourceOption(name, f"duplicate topic in {raw!r}")
    return tuple(sorted(topics))


def _parse_tags(raw: str) -> str:
    text = raw.strip()
    if text in ("", "*"):
        return "*"
    try:
        parsed = parse_tag_expression(text)
    except InvalidArgument as exc:
        raise InvalidSourceOption("tags", str(exc)) from None
    if parsed.tags is None:
        return "*"
    return " || ".join(part.strip() for part in text.split("||"))


def _parse_starting(lower: Mapping[str, str], topics: tuple[str, ...]) -> StartingPosition | None:
    given = [n for n in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp") if n in lower]
    if len(given) > 1:
        raise InvalidSourceOption(
            "startingOffsets",
            "set only one of startingOffsets, startingTimestamp, startingOffsetsByTimestamp",
        )
    if "startingtimestamp" in lower:
        return StartingPosition(StartKind.TIMESTAMP, timestamp_ms=_timestamp(lower, "startingTimestamp"))
    if "startingoffsetsbytimestamp" in lower:
        per_queue = _per_queue_json(lower["startingoffsetsbytimestamp"], "startingOffsetsByTimestamp", topics)
        for queues in per_queue.values():
            for ts in queues.values():
                if ts < 0:
                    raise InvalidSourceOption(
                        "startingOffsetsByTimestamp", f"timestamps must be >= 0, got {ts}"
                    )
        return StartingPosition(StartKind.TIMESTAMPS, per_queue=per_queue)
    raw = lower.get("startingoffsets")
    if raw is None:
        return None
    text = raw.strip().lower()
    if text == "earliest":
        return StartingPosition(StartKind.EARLIEST)
    if text == "latest":
        return StartingPosition(StartKind.LATEST)
    per_queue = _per_queue_json(raw, "startingOffsets", topics)
    _check_offsets(per_queue, "startingOffsets")
    return StartingPosition(StartKind.OFFSETS, per_queue=per_queue)


def _parse_ending(lower: Mapping[str, str], topics: tuple[str, ...]) -> EndingPosition | None:
    if "endingoffsets" in lower and "endingtimestamp" in lower:
        raise InvalidSourceOption("endingOffsets", "set only one of endingOffsets and endingTimestamp")
    if "endingtimestamp" in lower:
        return EndingPosition(EndKind.TIMESTAMP, timestamp_ms=_timestamp(lower, "endingTimestamp"))
    raw = lower.get("endingoffsets")
    if raw is None:
        return None
    if raw.strip().lower() == "latest":
        return EndingPosition(EndKind.LATEST)
    if raw.strip().lower() == "earliest":
        raise InvalidSourceOption("endingOffsets", "'earliest' is not allowed; use 'latest' or JSON")
    per_queue = _per_queue_json(raw, "endingOffsets", topics)
    _check_offsets(per_queue, "endingOffsets")
    return EndingPosition(EndKind.OFFSETS, per_queue=per_queue)


def _per_queue_json(raw: str, name: str, topics: tuple[str, ...]) -> PerQueue:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidSourceOption(name, f'expected JSON like {{"orders": {{"0": 12}}}}: {exc}') from None
    if not isinstance(value, dict):
        raise InvalidSourceOption(name, 'expected a JSON object like {"orders": {"0": 12}}')
    result: PerQueue = {}
    for topic, queues in value.items():
        if topic not in topics:
            raise InvalidSourceOption(
                name, f"topic {topic!r} is not among the subscribed topics {list(topics)}"
            )
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


def _timestamp(lower: Mapping[str, str], name: str) -> int:
    raw = lower[name.lower()].strip()
    if not raw.isdigit():
        raise InvalidSourceOption(name, f"expected epoch milliseconds (a non-negative integer), got {raw!r}")
    return int(raw)


def _parse_max_per_trigger(lower: Mapping[str, str]) -> int | None:
    if "maxmessagespertrigger" in lower and "maxoffsetspertrigger" in lower:
        raise InvalidSourceOption(
            "maxMessagesPerTrigger",
            "set only one of maxMessagesPerTrigger and its alias maxOffsetsPerTrigger",
        )
    name = "maxOffsetsPerTrigger" if "maxoffsetspertrigger" in lower else "maxMessagesPerTrigger"
    return _optional_positive_int(lower, name)


def _optional_positive_int(lower: Mapping[str, str], name: str) -> int | None:
    raw = lower.get(name.lower())
    if raw is None:
        return None
    text = raw.strip()
    if not text.isdigit() or int(text) <= 0:
        raise InvalidSourceOption(name, f"expected a positive integer, got {raw!r}")
    return int(text)


def _non_negative_int(lower: Mapping[str, str], name: str, *, default: int) -> int:
    raw = lower.get(name.lower())
    if raw is None:
        return default
    if not raw.strip().isdigit():
        raise InvalidSourceOption(name, f"expected a non-negative integer, got {raw!r}")
    return int(raw.strip())


def _parse_bool(lower: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = lower.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text not in ("true", "false"):
        raise InvalidSourceOption(name, f"expected 'true' or 'false', got {raw!r}")
    return text == "true"


def _parse_group(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return validate_group(raw)
    except InvalidArgument as exc:
        raise InvalidSourceOption("group", str(exc)) from None
