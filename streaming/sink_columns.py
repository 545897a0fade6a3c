"""Options and input columns of the ``sparkmq`` sink, and their conversion to staged parts.

Pure (no I/O, no Spark session): :func:`parse_sink_options` turns Spark's ``str -> str``
options into a frozen :class:`SinkOptions`; :func:`check_input_schema` refuses, at query start,
a DataFrame without ``body`` (or ``value``), with a column of the wrong type or mixing the two
shapes (the message names the column); :func:`part_batch` turns one Arrow batch of the input
into :data:`store.publish.sink_staging.PART_SCHEMA` on the executors, vectorised.

Two shapes of input. Kafka-shaped rows (``key``, ``value``, ``headers``, ``partition``,
``topic``: what ``format("kafka")`` takes) are described in :mod:`streaming.sink_kafka`.
RocketMQ-shaped input columns (all but ``body`` optional)::

    body          binary | string        the message body (null is refused)
    topic         string                 per-row topic; null or absent -> option ``topic``
    tags          string
    keys          string | array<string> RocketMQ KEYS (an array is joined with spaces)
    properties    map<string,string>     user properties
    queue_id      tinyint..bigint        explicit queue (wins over sharding_key)
    sharding_key  string                 queue = abs(javaHash(key)) % queues (RocketMQ order)
    delay_level   tinyint..bigint        0 = none; N: the N-th level of the broker's table
                                         (above it clamps), parked in SCHEDULE_TOPIC_XXXX
    deliver_at    timestamp              timer message: delivered at that time (RocketMQ 5
                                         TIMER_DELIVER_MS, rounded up to the second)
    delay_ms      tinyint..bigint        timer message: delivered this long after publish
                                         (TIMER_DELAY_MS)

At most one of ``delay_level`` / ``deliver_at`` / ``delay_ms`` per row; the timer columns
travel as the ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` properties of the staged row.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cluster import InvalidBootstrapAddress, parse_bootstrap
from store import PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS, InvalidArgument, validate_topic
from store.publish import PART_SCHEMA, check_id
from streaming.http_access import ACCESS_OPTIONS, InvalidAccessOption, parse_access
from streaming.kafka_options import BOOTSTRAP_SERVERS, bootstrap_endpoint, sink_refusal
from streaming.sink_kafka import KAFKA, KAFKA_ACCEPTED, ROCKETMQ, ShapeError, kafka_part_batch, row_shape

MIB = 1 << 20


class InvalidSinkOption(InvalidArgument):
    """An option of ``writeStream/write.format("sparkmq")`` is missing, malformed or contradictory."""

    code = "invalid_sink_option"

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"sparkmq sink option '{option}': {problem}")
        self.option = option


class InvalidSinkColumn(InvalidArgument):
    """The DataFrame written to ``sparkmq`` lacks ``body`` or has a column of the wrong type."""

    code = "invalid_sink_column"

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(f"sparkmq sink column '{column}': {problem} ({ACCEPTED_HELP})")
        self.column = column


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options. Picklable (travels to executors inside the writer)."""

    endpoint: str | None
    path: str | None
    #: Topic of rows without a ``topic`` value.
    topic: str | None
    #: Fixed sink id; None = the streaming query's id (stable across restarts of a checkpoint).
    sink_id: str | None
    #: Batch writes only: a fixed batch id (with ``sinkId``, makes a re-run of a job a no-op).
    batch_id: int | None
    request_timeout_s: float
    #: How long an upload or commit keeps retrying a broker that is down (restarting).
    retry_timeout_s: float
    #: Endpoint mode: a task uploads its rows in parts of about this many bytes.
    part_max_bytes: int
    auth_token: str | None = field(default=None, repr=False)
    #: CA (PEM) of the brokers' HTTPS certificates (``tlsCa``); ``None``: the system's.
    tls_ca: str | None = None
    #: Test-only fault injection (see ``streaming.writer.Fault``); never documented for users.
    fault: str | None = None
    #: The input's shape, ``rocketmq`` or ``kafka`` (set from the DataFrame at query start).
    shape: str = ROCKETMQ
    #: The endpoint came from ``kafka.bootstrap.servers`` (checked to answer HTTP at start).
    endpoint_from_bootstrap: bool = False


_KNOWN = {
    "endpoint", "path", "topic", "sinkid", "batchid", "requesttimeoutms", "retrytimeoutms",
    "partmaxbytes", *ACCESS_OPTIONS, "checkpointlocation", "_faultinjection", "includeheaders",
    BOOTSTRAP_SERVERS,
}  # fmt: skip


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    lower = {k.lower(): v for k, v in options.items()}
    for name in sorted(lower):
        reason = sink_refusal(name)
        if reason is not None:
            raise InvalidSinkOption(name, f"cannot apply to sparkmq: {reason}")
    unknown = sorted(set(lower) - _KNOWN)
    if unknown:
        raise InvalidSinkOption(unknown[0], "unknown option (see docs/exactly_once.md)")
    if lower.get("includeheaders", "false").strip().lower() not in ("true", "false"):
        raise InvalidSinkOption(
            "includeHeaders", f"expected 'true' or 'false', got {lower['includeheaders']!r}"
        )
    endpoint, path = lower.get("endpoint"), lower.get("path")
    bootstrap = lower.get(BOOTSTRAP_SERVERS)
    if bootstrap is not None:
        if endpoint is not None:
            raise InvalidSinkOption(
                BOOTSTRAP_SERVERS, "set only one of 'endpoint' and 'kafka.bootstrap.servers' (a synonym)"
            )
        try:
            endpoint = bootstrap_endpoint(bootstrap)
        except InvalidArgument as exc:
            raise InvalidSinkOption(BOOTSTRAP_SERVERS, str(exc)) from None
    if (endpoint is None) == (path is None):
        raise InvalidSinkOption(
            "endpoint", "set exactly one of 'endpoint' (broker URL) and 'path' (store dir)"
        )
    if endpoint is not None:
        try:  # a bootstrap list: "http://a:8081,http://b:8082", tried in order
            endpoint = ",".join(parse_bootstrap(endpoint))
        except InvalidBootstrapAddress as exc:
            raise InvalidSinkOption("endpoint", str(exc)) from None
    if path is not None and not os.path.isdir(path):
        raise InvalidSinkOption("path", f"{path!r} is not an existing store directory")
    try:
        auth, tls_ca = parse_access(lower, endpoint)
    except InvalidAccessOption as exc:
        raise InvalidSinkOption(exc.option, exc.reason) from None
    topic = lower.get("topic")
    if topic is not None:
        try:
            validate_topic(topic)
        except InvalidArgument as exc:
            raise InvalidSinkOption("topic", str(exc)) from exc
    sink_id = lower.get("sinkid")
    if sink_id is not None:
        try:
            check_id("sink id", sink_id)
        except InvalidArgument as exc:
            raise InvalidSinkOption("sinkId", str(exc)) from exc
    return SinkOptions(
        endpoint=endpoint,
        path=path,
        topic=topic,
        sink_id=sink_id,
        batch_id=_int(lower, "batchId", None, minimum=0),
        request_timeout_s=(_int(lower, "requestTimeoutMs", 30_000) or 30_000) / 1000,
        retry_timeout_s=(_int(lower, "retryTimeoutMs", 120_000, minimum=0) or 0) / 1000,
        part_max_bytes=_int(lower, "partMaxBytes", 32 * MIB) or 32 * MIB,
        auth_token=auth,
        tls_ca=tls_ca,
        fault=lower.get("_faultinjection") or None,
        endpoint_from_bootstrap=bootstrap is not None,
    )


def _int(lower: Mapping[str, str], name: str, default: int | None, minimum: int = 1) -> int | None:
    raw = lower.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidSinkOption(name, f"must be an integer, got {raw!r}") from None
    if value < minimum:
        raise InvalidSinkOption(name, f"must be >= {minimum}, got {value}")
    return value


# -- input schema --------------------------------------------------------------------------------

_INTEGERS = ("tinyint", "smallint", "int", "bigint")
ACCEPTED = {
    "body": ("binary", "string"),
    "topic": ("string",),
    "tags": ("string",),
    "keys": ("string", "array<string>"),
    "properties": ("map<string,string>",),
    "queue_id": _INTEGERS,
    "sharding_key": ("string",),
    "delay_level": _INTEGERS,
    "deliver_at": ("timestamp", "timestamp_ntz"),
    "delay_ms": _INTEGERS,
}
ACCEPTED_HELP = (
    "accepted columns: "
    + ", ".join(f"{c} {'|'.join(t)}" for c, t in ACCEPTED.items())
    + "; or Kafka-shaped: "
    + ", ".join(f"{c} {'|'.join(t)}" for c, t in KAFKA_ACCEPTED.items())
)


def check_input_schema(schema: Any, default_topic: str | None) -> str:
    """Refuse a DataFrame the sink cannot write; ``schema`` is a pyspark ``StructType``.
    Returns its shape, ``"rocketmq"`` or ``"kafka"``."""
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    try:
        shape = row_shape(types, frozenset(ACCEPTED) - {"topic"})
    except ShapeError as exc:
        raise InvalidSinkColumn(exc.column, str(exc)) from None
    accepted = KAFKA_ACCEPTED if shape == KAFKA else ACCEPTED
    if shape == ROCKETMQ and "body" not in types:
        raise InvalidSinkColumn(
            "body",
            "is required (or 'value' for Kafka-shaped rows); "
            f"the DataFrame has {sorted(types) or 'no columns'}",
        )
    for name, spark_type in types.items():
        allowed = accepted.get(name)
        if allowed is None:
            raise InvalidSinkColumn(
                name, f"is not a column the sink knows in {shape}-shaped rows (rename or drop it)"
            )
        if spark_type not in allowed:
            raise InvalidSinkColumn(name, f"has type {spark_type}; expected {' or '.join(allowed)}")
    if default_topic is None and "topic" not in types:
        raise InvalidSinkOption("topic", "is required unless the DataFrame has a 'topic' column")
    return shape


# -- executor-side conversion -----------------------------------------------------------------


def part_batch(batch: pa.RecordBatch, options: SinkOptions) -> pa.RecordBatch:
    """One input batch as a :data:`PART_SCHEMA` batch, by the input's shape."""
    if options.shape == KAFKA:
        try:
            return kafka_part_batch(batch, options.topic)
        except ShapeError as exc:
            raise InvalidSinkColumn(exc.column, str(exc)) from None
    return to_part_batch(batch, options.topic)


def to_part_batch(batch: pa.RecordBatch, default_topic: str | None) -> pa.RecordBatch:
    """One input batch (checked schema) as a :data:`PART_SCHEMA` batch, column by column."""
    n = batch.num_rows
    names = set(batch.schema.names)

    def column(name: str) -> pa.Array | None:
        return batch.column(name) if name in names else None

    body = column("body")
    assert body is not None
    if body.null_count:
        raise InvalidSinkColumn("body", f"is null in {body.null_count} row(s); a message needs a body")
    body = body.cast(pa.binary())
    topic = _topic_column(column("topic"), default_topic, n)
    keys = column("keys")
    if keys is not None and (pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type)):
        keys = pc.binary_join(keys, " ")
    delay_level = _cast_or_nulls(column("delay_level"), pa.int32(), n)
    properties = _map_column(column("properties"), n)
    properties = _with_timer_properties(properties, delay_level, column("deliver_at"), column("delay_ms"))
    return pa.RecordBatch.from_arrays(
        [
            topic,
            body,
            _cast_or_nulls(column("tags"), pa.string(), n),
            _cast_or_nulls(keys, pa.string(), n),
            properties,
            _cast_or_nulls(column("queue_id"), pa.int32(), n),
            _cast_or_nulls(column("sharding_key"), pa.string(), n),
            delay_level,
        ],
        schema=PART_SCHEMA,
    )


def _epoch_ms(values: pa.Array) -> pa.Array:
    """Milliseconds since the epoch of a timestamp column (any unit, with or without zone)."""
    unit = values.type.unit
    raw = values.cast(pa.timestamp(unit)).cast(pa.int64())
    scale = {"s": 1000, "ms": 1, "us": 1 / 1000, "ns": 1 / 1_000_000}[unit]
    if scale >= 1:
        return pc.multiply(raw, int(scale))
    return pc.divide(raw, int(1 / scale))  # floor for times after 1970


def _with_timer_properties(
    properties: pa.Array, delay_level: pa.Array, deliver_at: pa.Array | None, delay_ms: pa.Array | None
) -> pa.Array:
    """``properties`` plus ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` where a row asks for a timer;
    refuses a row with two scheduling columns or a negative level or delay."""
    if delay_level.null_count < len(delay_level) and pc.any(pc.less(delay_level, 0)).as_py():
        raise InvalidSinkColumn("delay_level", "is negative in some row (0 = no delay)")
    given = [(name, c) for name, c in (("deliver_at", deliver_at), ("delay_ms", delay_ms)) if c is not None]
    given = [(name, c) for name, c in given if c.null_count < len(c)]
    if not given:
        return properties
    counts = pc.cast(pc.is_valid(delay_level), pa.int8())
    for _, c in given:
        counts = pc.add(counts, pc.cast(pc.is_valid(c), pa.int8()))
    if pc.any(pc.greater(counts, 1)).as_py():
        raise InvalidSinkColumn(
            given[0][0], "is set in a row that also sets another of delay_level, deliver_at, delay_ms"
        )
    values: dict[str, list[int | None]] = {}
    for name, c in given:
        if name == "delay_ms":
            ms = c.cast(pa.int64())
            if pc.any(pc.less(ms, 0)).as_py():
                raise InvalidSinkColumn("delay_ms", "is negative in some row")
            values[PROPERTY_TIMER_DELAY_MS] = ms.to_pylist()
        else:
            values[PROPERTY_TIMER_DELIVER_MS] = _epoch_ms(c).to_pylist()
    rows = properties.to_pylist()
    for prop, per_row in values.items():
        for i, value in enumerate(per_row):
            if value is not None:
                rows[i] = [*(rows[i] or ()), (prop, str(value))]
    return pa.array(rows, type=properties.type)


def _topic_column(topic: pa.Array | None, default: str | None, n: int) -> pa.Array:
    if topic is None or topic.null_count == n:
        if default is None:
            raise InvalidSinkColumn("topic", "is null and no 'topic' option is set")
        return pa.array([default] * n, pa.string()) if n else pa.array([], pa.string())
    topic = topic.cast(pa.string())
    if topic.null_count:
        if default is None:
            raise InvalidSinkColumn(
                "topic", f"is null in {topic.null_count} row(s) and no 'topic' option is set"
            )
        topic = pc.fill_null(topic, default)
    return topic


def _cast_or_nulls(values: pa.Array | None, to: pa.DataType, n: int) -> pa.Array:
    if values is None:
        return pa.nulls(n, to)
    return values if values.type == to else values.cast(to)


def _map_column(values: pa.Array | None, n: int) -> pa.Array:
    to = PART_SCHEMA.field("properties").type
    if values is None:
        return pa.nulls(n, to)
    if values.type == to:
        return values
    return pa.MapArray.from_arrays(
        values.offsets, values.keys.cast(pa.string()), values.items.cast(pa.string()),
        mask=values.is_null() if values.null_count else None,
    )  # fmt: skip
