"""Spark's Kafka option names on the sparkmq source and sink (pure: no Spark, no store).

Every Kafka option either keeps Kafka's meaning or is refused at load() with its name and the
reason; unknown and conflicting options fail with their names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.admission import MinTriggerGate
from streaming.options import EndKind, InvalidSourceOption, RowShape, StartKind, parse_options
from streaming.sink_columns import (
    InvalidSinkColumn,
    InvalidSinkOption,
    check_input_schema,
    parse_sink_options,
)
from streaming.subscription import Kind

BASE = {"endpoint": "http://h:1"}


def test_subscribe_is_topics_and_tolerates_blanks_as_kafka() -> None:
    opts = parse_options({**BASE, "subscribe": "b, a,"})
    assert opts.subscription.kind is Kind.TOPICS
    assert opts.topics == ("a", "b")


def test_subscribe_pattern_matches_whole_names_and_never_system_topics() -> None:
    opts = parse_options({**BASE, "subscribePattern": "orders-.*"})
    sub = opts.subscription
    assert sub.kind is Kind.PATTERN
    listed = ["orders-eu", "orders-us", "xorders-eu", "orders", "%RETRY%orders-g", "rmq_sys_wheel_timer"]
    assert sub.topics_now(lambda: listed) == ("orders-eu", "orders-us")
    assert sub.admits("orders-x") and not sub.admits("my-orders-x")
    everything = parse_options({**BASE, "subscribePattern": ".*", "includeRetry": "g"}).subscription
    assert everything.topics_now(lambda: ["a", "SCHEDULE_TOPIC_XXXX", "%DLQ%g"]) == ("%RETRY%g", "a")


def test_assign_reads_exactly_the_named_queues() -> None:
    opts = parse_options({**BASE, "assign": '{"orders": [0, 2], "refunds": [1]}'})
    sub = opts.subscription
    assert (sub.kind, opts.topics) == (Kind.ASSIGN, ("orders", "refunds"))
    assert sub.admits("orders", 2) and not sub.admits("orders", 1) and not sub.admits("other", 0)
    start = parse_options({**BASE, "assign": '{"orders": [0, 2]}', "startingOffsets": '{"orders": {"2": 5}}'})
    assert start.starting is not None and start.starting.per_queue == {"orders": {2: 5}}


def test_rate_options() -> None:
    opts = parse_options({**BASE, "topic": "t", "minOffsetsPerTrigger": "100", "maxTriggerDelay": "30s"})
    assert (opts.min_messages_per_trigger, opts.max_trigger_delay_s) == (100, 30.0)
    assert parse_options({**BASE, "topic": "t", "minOffsetsPerTrigger": "5"}).max_trigger_delay_s == 900.0
    millis = parse_options({**BASE, "topic": "t", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "1500"})
    assert millis.max_trigger_delay_s == 1.5
    both = parse_options({**BASE, "topic": "t", "minOffsetsPerTrigger": "5", "maxOffsetsPerTrigger": "5"})
    assert (both.min_messages_per_trigger, both.max_messages_per_trigger) == (5, 5)


def test_positions_and_the_rest_of_kafkas_options(tmp_path: Path) -> None:
    opts = parse_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:8080",
            "subscribe": "orders",
            "endingOffsetsByTimestamp": '{"orders": {"0": 1000}}',
            "startingTimestamp": "5",
            "startingOffsetsByTimestampStrategy": "error",
            "maxRecordsPerPartition": "1000",
            "kafkaConsumer.pollTimeoutMs": "2000",
            "fetchOffset.numRetries": "5",
            "fetchOffset.retryIntervalMs": "20",
            "failOnDataLoss": "false",
            "minPartitions": "4",
        }
    )
    assert (opts.endpoint, opts.endpoint_from_bootstrap) == ("http://127.0.0.1:8080", True)
    assert opts.ending is not None and opts.ending.kind is EndKind.TIMESTAMPS
    assert opts.ending.per_queue == {"orders": {0: 1000}}
    assert opts.starting is not None and opts.starting.kind is StartKind.TIMESTAMP
    assert opts.fail_on_no_timestamp_match
    assert (opts.max_records_per_partition, opts.request_timeout_s) == (1000, 2.0)
    assert (opts.fetch_retries, opts.fetch_retry_interval_s) == (5, 0.02)
    assert parse_options({"kafka.bootstrap.servers": "https://b:9", "topic": "t"}).endpoint == "https://b:9"
    listed = parse_options({"kafka.bootstrap.servers": "a:1, https://b:9/", "topic": "t"})
    assert listed.endpoint == "http://a:1,https://b:9", "a bootstrap list, tried in order"
    assert (
        parse_options({"endpoint": "http://a:1/,http://b:2", "topic": "t"}).endpoint
        == "http://a:1,http://b:2"
    )
    assert parse_options({"path": str(tmp_path), "kafka.bootstrap.servers": "h:8080", "topic": "t"}).path


def test_schema_kafka_with_headers() -> None:
    opts = parse_options({**BASE, "topic": "t", "schema": "kafka", "includeHeaders": "true"})
    assert (opts.shape, opts.include_headers) == (RowShape.KAFKA, True)
    assert parse_options({**BASE, "topic": "t"}).shape is RowShape.ROCKETMQ


T = {**BASE, "topic": "t"}


@pytest.mark.parametrize(
    ("options", "named", "why"),
    [
        # inapplicable Kafka options: refused with the reason
        ({**T, "kafka.group.id": "g"}, "kafka.group.id", "Use the option 'group'"),
        ({**T, "groupIdPrefix": "p"}, "groupIdPrefix", "no Kafka consumer group"),
        # Kafka security settings are mapped (tests/streaming/test_http_access.py), but only sound ones
        ({**T, "kafka.security.protocol": "SASL_SSL"}, "kafka.security.protocol", "https://"),
        ({**T, "kafka.security.protocol": "GSSAPI"}, "kafka.security.protocol", "one of"),
        ({**T, "kafka.ssl.truststore.location": "/x"}, "kafka.ssl.truststore.location", "PEM"),
        ({**T, "kafka.ssl.keystore.location": "/x"}, "kafka.ssl.keystore.location", "tlsCa"),
        ({**T, "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset", "startingOffsets"),
        ({**T, "kafka.key.deserializer": "x"}, "kafka.key.deserializer", "always binary"),
        ({**T, "kafka.value.deserializer": "x"}, "kafka.value.deserializer", "always binary"),
        ({**T, "kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit", "checkpoint"),
        ({**T, "kafka.interceptor.classes": "x"}, "kafka.interceptor.classes", "nothing to intercept"),
        ({**T, "kafka.request.timeout.ms": "5"}, "kafka.request.timeout.ms", "requestTimeoutMs"),
        ({**T, "kafka.max.poll.records": "5"}, "kafka.max.poll.records", "runs none"),
        # conflicts
        ({**BASE, "topic": "a", "subscribe": "b"}, "subscribe", "set only one of topic, subscribe"),
        ({**BASE, "subscribe": "a", "subscribePattern": "b.*"}, "subscribePattern", "set only one"),
        ({**BASE, "subscribe": "a", "assign": '{"a": [0]}'}, "assign", "set only one"),
        (
            {"endpoint": "http://h:1", "kafka.bootstrap.servers": "h:1", "topic": "t"},
            "kafka.bootstrap.servers",
            "synonym",
        ),
        (
            {**T, "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            "minOffsetsPerTrigger",
            "higher than",
        ),
        ({**T, "maxTriggerDelay": "5m"}, "maxTriggerDelay", "without minOffsetsPerTrigger"),
        (
            {**T, "endingOffsets": "latest", "endingOffsetsByTimestamp": '{"t": {"0": 1}}'},
            "endingOffsets",
            "only one",
        ),
        (
            {**T, "endingTimestamp": "5", "endingOffsetsByTimestamp": '{"t": {"0": 1}}'},
            "endingOffsets",
            "only one",
        ),
        (
            {**T, "requestTimeoutMs": "5", "kafkaConsumer.pollTimeoutMs": "5"},
            "kafkaConsumer.pollTimeoutMs",
            "only one",
        ),
        ({**T, "includeHeaders": "true"}, "includeHeaders", "schema', 'kafka'"),
        (
            {**T, "startingOffsetsByTimestampStrategy": "error"},
            "startingOffsetsByTimestampStrategy",
            "applies only",
        ),
        ({"endpoint": "http://h:1", "assign": '{"t": [0]}', "includeRetry": "g"}, "includeRetry", "assign"),
        # malformed
        ({**BASE, "subscribe": " , "}, "subscribe", "names no topic"),
        ({**BASE, "subscribePattern": "(unclosed"}, "subscribePattern", "not a regular expression"),
        ({**BASE, "subscribePattern": "  "}, "subscribePattern", "is empty"),
        ({**BASE, "assign": "orders"}, "assign", "expected JSON"),
        ({**BASE, "assign": '{"orders": []}'}, "assign", "non-empty list"),
        ({**BASE, "assign": '{"orders": [-1]}'}, "assign", "integers >= 0"),
        ({**BASE, "assign": '{"bad topic": [0]}'}, "assign", "topic"),
        (
            {**BASE, "assign": '{"t": [0]}', "startingOffsets": '{"t": {"1": 5}}'},
            "startingOffsets",
            "not among the assigned",
        ),
        (
            {**BASE, "subscribePattern": "o.*", "startingOffsets": '{"x": {"0": 5}}'},
            "startingOffsets",
            "not among",
        ),
        ({**T, "endingOffsetsByTimestamp": '{"t": {"0": -1}}'}, "endingOffsetsByTimestamp", ">= 0"),
        ({**T, "minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger", "positive integer"),
        ({**T, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, "maxTriggerDelay", "bad duration"),
        ({**T, "maxRecordsPerPartition": "0"}, "maxRecordsPerPartition", "positive integer"),
        ({**T, "fetchOffset.numRetries": "x"}, "fetchOffset.numRetries", "non-negative integer"),
        ({**T, "schema": "avro"}, "schema", "'rocketmq' (the default) or 'kafka'"),
        ({**T, "schema": "kafka", "includeHeaders": "yes"}, "includeHeaders", "'true' or 'false'"),
        (
            {**T, "startingTimestamp": "5", "startingOffsetsByTimestampStrategy": "fail"},
            "startingOffsetsByTimestampStrategy",
            "'error' or 'latest'",
        ),
        ({"kafka.bootstrap.servers": "a:1,b", "topic": "t"}, "kafka.bootstrap.servers", "host:port"),
        ({"kafka.bootstrap.servers": "localhost", "topic": "t"}, "kafka.bootstrap.servers", "host:port"),
        # unknown
        ({**T, "subscribePatern": "x"}, "subscribepatern", "unknown option"),
        ({**T, "maxOffsetPerTrigger": "5"}, "maxoffsetpertrigger", "unknown option"),
    ],
)
def test_every_refused_option_is_named_with_the_reason(options: dict[str, str], named: str, why: str) -> None:
    with pytest.raises(InvalidSourceOption, match=f"option '{named}'") as info:
        parse_options(options)
    assert info.value.option == named
    assert why in str(info.value)


def test_mode_rules_of_the_kafka_options() -> None:
    with pytest.raises(InvalidSourceOption, match="'endingOffsetsByTimestamp': is only valid for batch"):
        parse_options({**T, "endingOffsetsByTimestamp": '{"t": {"0": 1}}'}).validate_for_stream()
    with pytest.raises(InvalidSourceOption, match="'minOffsetsPerTrigger': is only valid for streams"):
        parse_options({**T, "minOffsetsPerTrigger": "5"}).validate_for_batch()
    with pytest.raises(InvalidSourceOption, match="'maxOffsetsPerTrigger': is only valid for streams"):
        parse_options({**T, "maxOffsetsPerTrigger": "5"}).validate_for_batch()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_min_trigger_gate_follows_kafkas_rule() -> None:
    clock = FakeClock()
    gate = MinTriggerGate(100, 60.0, clock)
    assert not gate.holds_back(3)  # the first planning step fires: Kafka's clock starts at 0
    clock.now += 10
    assert gate.holds_back(99)  # too few, too early
    clock.now += 10
    assert not gate.holds_back(100)  # enough: fires and restarts the clock
    clock.now += 59
    assert gate.holds_back(1)
    clock.now += 1
    assert not gate.holds_back(1)  # the delay passed: fires with what there is
    assert gate.holds_back(0)


# -- the sink ------------------------------------------------------------------------------------


def test_sink_accepts_kafkas_address_and_refuses_producer_settings(tmp_path: Path) -> None:
    parsed = parse_sink_options(
        {"kafka.bootstrap.servers": "127.0.0.1:8080", "topic": "t", "includeHeaders": "true"}
    )
    assert (parsed.endpoint, parsed.endpoint_from_bootstrap) == ("http://127.0.0.1:8080", True)
    for name, why in (
        ("kafka.key.serializer", "as given"),
        ("kafka.partitioner.class", "javaHash"),
        ("kafka.transactional.id", "exactly-once"),
        ("kafka.acks", "durably"),
        ("kafka.sasl.client.callback.handler.class", "HTTP credentials"),
        ("kafka.linger.ms", "runs none"),
    ):
        expected = f"sink option '{name}': cannot apply to sparkmq: .*{why}"
        with pytest.raises(InvalidSinkOption, match=expected):
            parse_sink_options({"endpoint": "http://h:1", name: "x"})
    with pytest.raises(InvalidSinkOption, match=r"'kafka\.bootstrap\.servers'.*synonym"):
        parse_sink_options({"endpoint": "http://h:1", "kafka.bootstrap.servers": "h:1"})


_TYPES = {
    "STRING": StringType(),
    "BINARY": BinaryType(),
    "INT": IntegerType(),
    "TIMESTAMP": TimestampType(),
    "MAP": MapType(StringType(), StringType()),
    "HEADERS": ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
}


def _schema(ddl: str) -> Any:
    """``"name TYPE, ..."`` as a StructType (no session needed)."""
    fields = [part.strip().split(" ", 1) for part in ddl.split(", ") if part.strip()]
    return StructType([StructField(name, _TYPES[kind]) for name, kind in fields])


def test_sink_shapes() -> None:
    assert check_input_schema(_schema("key STRING, value STRING"), "t") == "kafka"
    assert check_input_schema(_schema("value BINARY, topic STRING, partition INT"), None) == "kafka"
    headers = "value BINARY, headers HEADERS"
    assert check_input_schema(_schema(headers), "t") == "kafka"
    assert check_input_schema(_schema("body STRING, topic STRING"), None) == "rocketmq"


@pytest.mark.parametrize(
    ("ddl", "column", "message"),
    [
        (
            "key STRING, value STRING, tags STRING",
            "tags",
            "mixes Kafka-shaped columns (key, value) with RocketMQ-shaped columns (tags)",
        ),
        (
            "body STRING, partition INT",
            "body",
            "mixes Kafka-shaped columns (partition) with RocketMQ-shaped columns (body)",
        ),
        ("key STRING", "value", "is required in Kafka-shaped rows"),
        ("value STRING, key INT", "key", "has type int; expected binary or string"),
        ("value STRING, headers MAP", "headers", "has type map<string,string>"),
        ("value STRING, partition STRING", "partition", "has type string"),
        ("value STRING, timestamp TIMESTAMP", "timestamp", "not a column the sink knows in kafka-shaped"),
    ],
)
def test_sink_refuses_mixed_or_wrong_kafka_columns(ddl: str, column: str, message: str) -> None:
    with pytest.raises(InvalidSinkColumn, match=f"column '{column}'") as info:
        check_input_schema(_schema(ddl), "t")
    assert message in str(info.value)
