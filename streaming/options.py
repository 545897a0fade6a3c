"""Options of the ``sparkmq`` Spark source: parsed once, validated, frozen.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping. This module
turns that mapping into a :class:`SourceOptions` value or raises :class:`InvalidSourceOption`
naming the offending option, so a bad option fails at ``load()`` rather than deep inside a
Spark task. Spark's Kafka source options keep their names and their meaning (the table in
``docs/spark_source.md``): the queues (:mod:`streaming.subscription`), the start and end
(:mod:`streaming.positions`), the rate (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` +
``maxTriggerDelay``), ``includeHeaders`` with ``schema=kafka``, ``kafka.bootstrap.servers``.
Kafka options that cannot apply are refused with the reason (:mod:`streaming.kafka_options`).

Pure: no I/O except one ``os.path.isdir`` check for ``path``; no Spark imports.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from cluster import InvalidBootstrapAddress, parse_bootstrap
from store import (
    SCHEDULE_TOPIC,
    SENDBACK_TOPIC,
    TIMER_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    InvalidArgument,
    parse_tag_expression,
    validate_group,
)
from streaming.http_access import ACCESS_OPTIONS, InvalidAccessOption, parse_access
from streaming.kafka_options import BOOTSTRAP_SERVERS, bootstrap_endpoint, source_refusal, trigger_delay_ms
from streaming.positions import (
    EARLIEST_SENTINEL,
    LATEST_SENTINEL,
    EndingPosition,
    EndKind,
    InvalidSourceOption,
    PerQueue,
    StartingPosition,
    StartKind,
    parse_ending,
    parse_starting,
)
from streaming.subscription import Subscription, SubscriptionError, parse_subscription

__all__ = [
    "EARLIEST_SENTINEL",
    "LATEST_SENTINEL",
    "EndKind",
    "EndingPosition",
    "InvalidSourceOption",
    "PerQueue",
    "RowShape",
    "SourceOptions",
    "StartKind",
    "StartingPosition",
    "parse_options",
]

#: Spark's default ``maxTriggerDelay`` (15 minutes).
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60_000

#: System topics the internal ``systemTopics`` option unlocks (the stateful operators' inputs).
READABLE_SYSTEM_TOPICS = frozenset(
    {SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, SENDBACK_TOPIC}
)


class RowShape(enum.Enum):
    """``schema``: the rows' columns."""

    #: The default: RocketMQ's message fields (``streaming.schemas.MESSAGE_DDL``).
    ROCKETMQ = "rocketmq"
    #: Exactly Spark's Kafka source columns (``streaming.schemas.kafka_struct``).
    KAFKA = "kafka"


@dataclass(frozen=True)
class SourceOptions:
    """Validated options. Picklable (it travels to executors inside the reader)."""

    #: Exactly one of ``endpoint`` (HTTP base URL) and ``path`` (store directory) is the data
    #: plane. ``endpoint`` may accompany ``path``: then only group offsets go over HTTP.
    endpoint: str | None
    path: str | None
    #: Which queues (``topic(s)``, ``subscribe``, ``subscribePattern``, ``assign``).
    subscription: Subscription
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
    #: CA (PEM) of the brokers' HTTPS certificates (``tlsCa``); ``None``: the system's.
    tls_ca: str | None = None
    #: ``minOffsetsPerTrigger``: a micro-batch waits for this many offsets ...
    min_messages_per_trigger: int | None = None
    #: ... but no longer than this (``maxTriggerDelay``) since the last batch.
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_MS / 1000
    #: ``maxRecordsPerPartition``: no Spark task reads more offsets than this.
    max_records_per_partition: int | None = None
    #: ``startingOffsetsByTimestampStrategy=error``: fail when no message is at or after a
    #: starting timestamp (default ``latest``: start at the queue's max offset).
    fail_on_no_timestamp_match: bool = False
    #: ``fetchOffset.numRetries`` / ``fetchOffset.retryIntervalMs``: queue-head lookups retried.
    fetch_retries: int = 3
    fetch_retry_interval_s: float = 0.01
    #: ``clockIntervalMs``: with Spark's no-data micro-batches off, a batch still runs once per
    #: interval while no message arrives (the offsets carry a clock, :data:`offsets.CLOCK_KEY`):
    #: the operator job's timed queries fire their timers so. 0: off.
    clock_interval_ms: int = 0
    shape: RowShape = RowShape.ROCKETMQ
    #: ``includeHeaders`` (with ``schema=kafka``).
    include_headers: bool = False
    #: The endpoint came from ``kafka.bootstrap.servers`` (checked to answer HTTP at load()).
    endpoint_from_bootstrap: bool = False
    #: ``master`` (default) or ``replica``: read each queue from a slave of its replica group
    #: on purpose (bounded by what every in-sync replica holds, like the master's reads).
    read_from: str = "master"
    #: How the user spelled the per-trigger maximum (for messages).
    max_per_trigger_option: str = "maxMessagesPerTrigger"

    @property
    def data_mode(self) -> str:
        return "path" if self.path is not None else "endpoint"

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics named by the options (empty for ``subscribePattern``)."""
        return self.subscription.topics

    def validate_for_stream(self) -> SourceOptions:
        if self.ending is not None:
            raise InvalidSourceOption(
                self.ending.option, "is only valid for batch reads (spark.read), not streams"
            )
        return self

    def validate_for_batch(self) -> SourceOptions:
        for name, value in (
            (self.max_per_trigger_option, self.max_messages_per_trigger),
            ("minOffsetsPerTrigger", self.min_messages_per_trigger),
        ):
            if value is not None:
                raise InvalidSourceOption(
                    name, "is only valid for streams (spark.readStream), not batch reads"
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


_KNOWN = {
    "endpoint", "path", "topic", "topics", "subscribe", "subscribepattern", "assign", "tags",
    "startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy", "endingoffsets", "endingtimestamp",
    "endingoffsetsbytimestamp", "maxmessagespertrigger", "maxoffsetspertrigger",
    "minoffsetspertrigger", "maxtriggerdelay", "minpartitions", "maxrecordsperpartition", "group",
    "failondataloss", "requesttimeoutms", "kafkaconsumer.polltimeoutms", "fetchoffset.numretries",
    "fetchoffset.retryintervalms", "pollintervalms", "readchunkmessages", "clockintervalms", *ACCESS_OPTIONS,
    "groupcommitintervalms", "systemtopics", "includeretry", "schema", "includeheaders", "readfrom",
    BOOTSTRAP_SERVERS,
}  # fmt: skip


def _parse_read_from(value: str, endpoint: bool) -> str:
    if value not in ("master", "replica"):
        raise InvalidSourceOption("readFrom", f"must be master or replica, got {value!r}")
    if value == "replica" and not endpoint:
        raise InvalidSourceOption("readFrom", "replica reads need endpoint (a broker of a replica group)")
    return value


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Parse Spark's option mapping (keys compared case-insensitively).

    Raises :class:`InvalidSourceOption` for anything missing, malformed, contradictory or
    inapplicable. Mode-specific rules (``endingOffsets`` only for batch, ...) are checked by
    :meth:`SourceOptions.validate_for_stream` / :meth:`SourceOptions.validate_for_batch`.
    """
    lower = {k.lower(): v for k, v in options.items()}
    for name in sorted(lower):
        reason = source_refusal(name)
        if reason is not None:
            raise InvalidSourceOption(_spelled(options, name), f"cannot apply to sparkmq: {reason}")
    unknown = sorted(set(lower) - _KNOWN)
    if unknown:
        raise InvalidSourceOption(unknown[0], "unknown option (see docs/spark_source.md)")
    endpoint, path, from_bootstrap = _parse_location(lower)
    try:
        auth, tls_ca = parse_access(lower, endpoint)
    except InvalidAccessOption as exc:
        raise InvalidSourceOption(_spelled(options, exc.option.lower()), exc.reason) from None
    subscription = _parse_subscription(lower)
    admits = subscription.admits
    shape, include_headers = _parse_shape(lower)
    min_per_trigger, max_per_trigger, delay_s = _parse_rate(lower)
    return SourceOptions(
        endpoint=endpoint,
        path=path,
        subscription=subscription,
        tags=_parse_tags(lower.get("tags", "*")),
        starting=parse_starting(lower, admits),
        ending=parse_ending(lower, admits),
        max_messages_per_trigger=max_per_trigger,
        min_partitions=_optional_positive_int(lower, "minPartitions"),
        group=_parse_group(lower.get("group")),
        fail_on_data_loss=_parse_bool(lower, "failOnDataLoss", default=True),
        request_timeout_s=_request_timeout_ms(lower) / 1000.0,
        read_chunk_messages=_optional_positive_int(lower, "readChunkMessages") or 65_536,
        auth_token=auth,
        tls_ca=tls_ca,
        poll_interval_s=_non_negative_int(lower, "pollIntervalMs", default=50) / 1000.0,
        group_commit_interval_s=_non_negative_int(lower, "groupCommitIntervalMs", default=1000) / 1000.0,
        min_messages_per_trigger=min_per_trigger,
        max_trigger_delay_s=delay_s,
        max_records_per_partition=_optional_positive_int(lower, "maxRecordsPerPartition"),
        fail_on_no_timestamp_match=_parse_no_match_strategy(lower),
        fetch_retries=_non_negative_int(lower, "fetchOffset.numRetries", default=3),
        fetch_retry_interval_s=_non_negative_int(lower, "fetchOffset.retryIntervalMs", default=10) / 1000.0,
        clock_interval_ms=_non_negative_int(lower, "clockIntervalMs", default=0),
        shape=shape,
        include_headers=include_headers,
        endpoint_from_bootstrap=from_bootstrap,
        read_from=_parse_read_from(lower.get("readfrom", "master"), endpoint is not None),
        max_per_trigger_option=_max_per_trigger_name(lower),
    )


def _spelled(options: Mapping[str, str], lower_name: str) -> str:
    """The option name as the user wrote it."""
    return next((k for k in options if k.lower() == lower_name), lower_name)


# -- pieces ------------------------------------------------------------------------------------


def _parse_location(lower: Mapping[str, str]) -> tuple[str | None, str | None, bool]:
    endpoint = lower.get("endpoint")
    path = lower.get("path")
    bootstrap = lower.get(BOOTSTRAP_SERVERS)
    if bootstrap is not None:
        if endpoint is not None:
            raise InvalidSourceOption(
                BOOTSTRAP_SERVERS, "set only one of 'endpoint' and 'kafka.bootstrap.servers' (a synonym)"
            )
        try:
            endpoint = bootstrap_endpoint(bootstrap)
        except InvalidArgument as exc:
            raise InvalidSourceOption(BOOTSTRAP_SERVERS, str(exc)) from None
    if endpoint is None and path is None:
        raise InvalidSourceOption(
            "endpoint",
            "set either 'endpoint' (broker URL; 'kafka.bootstrap.servers' is a synonym) "
            "or 'path' (store directory)",
        )
    if endpoint is not None:
        try:  # a bootstrap list: "http://a:8081,http://b:8082", tried in order
            endpoint = ",".join(parse_bootstrap(endpoint))
        except InvalidBootstrapAddress as exc:
            raise InvalidSourceOption("endpoint", str(exc)) from None
    if path is not None:
        if not path:
            raise InvalidSourceOption("path", "must not be empty")
        if not os.path.isdir(path):
            raise InvalidSourceOption("path", f"{path!r} is not an existing store directory")
    return endpoint, path, bootstrap is not None


def _parse_subscription(lower: Mapping[str, str]) -> Subscription:
    system = lower.get("systemtopics", "false").strip().lower() == "true"
    try:
        return parse_subscription(lower, system_topics=READABLE_SYSTEM_TOPICS if system else frozenset())
    except SubscriptionError as exc:
        raise InvalidSourceOption(exc.option, str(exc)) from None


def _parse_shape(lower: Mapping[str, str]) -> tuple[RowShape, bool]:
    raw = lower.get("schema", RowShape.ROCKETMQ.value).strip().lower()
    try:
        shape = RowShape(raw)
    except ValueError:
        raise InvalidSourceOption(
            "schema", f"expected 'rocketmq' (the default) or 'kafka', got {raw!r}"
        ) from None
    include_headers = _parse_bool(lower, "includeHeaders", default=False)
    if include_headers and shape is not RowShape.KAFKA:
        raise InvalidSourceOption(
            "includeHeaders",
            "adds Kafka's 'headers' column, so it needs .option('schema', 'kafka') (the default "
            "RocketMQ-shaped rows always carry every user property in 'properties')",
        )
    return shape, include_headers


def _parse_rate(lower: Mapping[str, str]) -> tuple[int | None, int | None, float]:
    """``(minOffsetsPerTrigger, maxOffsetsPerTrigger, maxTriggerDelay seconds)``."""
    if "maxmessagespertrigger" in lower and "maxoffsetspertrigger" in lower:
        raise InvalidSourceOption(
            "maxMessagesPerTrigger",
            "set only one of maxMessagesPerTrigger and its alias maxOffsetsPerTrigger",
        )
    name = _max_per_trigger_name(lower)
    most = _optional_positive_int(lower, name)
    least = _optional_positive_int(lower, "minOffsetsPerTrigger")
    if least is not None and most is not None and least > most:
        raise InvalidSourceOption("minOffsetsPerTrigger", f"({least}) is higher than {name} ({most})")
    raw_delay = lower.get("maxtriggerdelay")
    if raw_delay is None:
        return least, most, DEFAULT_MAX_TRIGGER_DELAY_MS / 1000
    if least is None:
        raise InvalidSourceOption(
            "maxTriggerDelay",
            "has no effect without minOffsetsPerTrigger (it bounds how long a batch waits for it)",
        )
    try:
        return least, most, trigger_delay_ms(raw_delay) / 1000
    except InvalidArgument as exc:
        raise InvalidSourceOption("maxTriggerDelay", str(exc)) from None


def _max_per_trigger_name(lower: Mapping[str, str]) -> str:
    return "maxOffsetsPerTrigger" if "maxoffsetspertrigger" in lower else "maxMessagesPerTrigger"


def _parse_no_match_strategy(lower: Mapping[str, str]) -> bool:
    raw = lower.get("startingoffsetsbytimestampstrategy")
    if raw is None:
        return False
    text = raw.strip().lower()
    if text not in ("error", "latest"):
        raise InvalidSourceOption(
            "startingOffsetsByTimestampStrategy", f"expected 'error' or 'latest', got {raw!r}"
        )
    if "startingtimestamp" not in lower and "startingoffsetsbytimestamp" not in lower:
        raise InvalidSourceOption(
            "startingOffsetsByTimestampStrategy",
            "applies only with startingTimestamp or startingOffsetsByTimestamp",
        )
    return text == "error"


def _request_timeout_ms(lower: Mapping[str, str]) -> int:
    if "requesttimeoutms" in lower and "kafkaconsumer.polltimeoutms" in lower:
        raise InvalidSourceOption(
            "kafkaConsumer.pollTimeoutMs",
            "set only one of requestTimeoutMs and its alias kafkaConsumer.pollTimeoutMs",
        )
    name = "kafkaConsumer.pollTimeoutMs" if "kafkaconsumer.polltimeoutms" in lower else "requestTimeoutMs"
    return _optional_positive_int(lower, name) or 30_000


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
