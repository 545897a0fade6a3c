"""Spark's Kafka options, schema and sink rows on a real local Spark over real stores and brokers.

Batch-count checks only (never wall time): ``minOffsetsPerTrigger`` is shown by which rows share
a micro-batch, ``maxTriggerDelay`` by rows that could only arrive because the delay ran out.
"""

from __future__ import annotations

import importlib.util
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from store import MESSAGE_SCHEMA, Message, MessageStore, kafka_view
from streaming.schemas import KAFKA_ARROW_SCHEMA, KAFKA_DDL, KAFKA_HEADERS_ARROW_SCHEMA, KAFKA_HEADERS_DDL
from tests.streaming.conftest import open_store, produce
from tests.streaming.eo_helpers import register_sink, small_config, topic_rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180
ROOT = Path(__file__).resolve().parents[2]

#: Spark's Kafka source schema, written out field by field from
#: ``KafkaRecordToRowConverter.schemaWithoutHeaders`` / ``headersType`` (every field nullable).
SPARK_KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)
SPARK_KAFKA_HEADERS = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
        True,
    ),
    True,
)


def test_schema_kafka_is_exactly_sparks_kafka_schema(spark: Any, tmp_path: Path) -> None:
    with_headers = StructType([*SPARK_KAFKA_SCHEMA.fields, SPARK_KAFKA_HEADERS])
    base = spark.read.format("sparkmq").option("path", str(tmp_path)).option("subscribe", "t")
    assert base.option("schema", "kafka").load().schema == SPARK_KAFKA_SCHEMA
    headers = base.option("schema", "kafka").option("includeHeaders", "true").load().schema
    assert headers == with_headers
    assert [f.jsonValue() for f in headers.fields] == [f.jsonValue() for f in with_headers.fields]
    assert StructType.fromDDL(KAFKA_DDL) == SPARK_KAFKA_SCHEMA
    assert StructType.fromDDL(KAFKA_HEADERS_DDL) == with_headers
    assert to_arrow_schema(SPARK_KAFKA_SCHEMA, timezone="UTC").equals(KAFKA_ARROW_SCHEMA)
    assert to_arrow_schema(with_headers, timezone="UTC").equals(KAFKA_HEADERS_ARROW_SCHEMA)
    stream = spark.readStream.format("sparkmq").option("path", str(tmp_path)).option("subscribe", "t")
    assert stream.option("schema", "kafka").load().schema == SPARK_KAFKA_SCHEMA
    default = spark.read.format("sparkmq").option("path", str(tmp_path)).option("topic", "t").load()
    assert "body" in default.schema.names  # the default stays RocketMQ-shaped


def test_kafka_rows_carry_keys_values_and_headers(spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        store.create_topic("orders", 2)
        store.put_messages(
            [
                Message(
                    "orders",
                    b"v0",
                    keys=("order-0",),
                    properties={"region": "eu"},
                    queue_id=0,
                    tags="paid",
                    born_timestamp_ms=1_700_000_000_456,
                ),
                Message("orders", b"v1", keys=("a", "b"), queue_id=1, born_timestamp_ms=1_700_000_000_123),
                Message("orders", b"v2", queue_id=0),
            ]
        )
    rows = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("subscribe", "orders")
        .option("schema", "kafka")
        .option("includeHeaders", "true")
        .load()
        .orderBy("partition", "offset")
        .collect()
    )
    got = [(r.key, r.value, r.topic, r.partition, r.offset, r.timestampType, r.headers) for r in rows]
    assert got == [
        (b"order-0", b"v0", "orders", 0, 0, 0, [(("region", b"eu"))]),
        (None, b"v2", "orders", 0, 1, 0, None),
        (b"a b", b"v1", "orders", 1, 0, 0, None),
    ]
    assert int(rows[2].timestamp.timestamp() * 1000) == 1_700_000_000_123  # the born time (CreateTime)
    assert int(rows[0].timestamp.timestamp() * 1000) == 1_700_000_000_456


def test_assign_reads_only_the_assigned_queues(spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 12, queues=3)
        produce(store, "refunds", 4, queues=2)
    rows = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("assign", '{"orders": [0, 2], "refunds": [1]}')
        .option("schema", "kafka")
        .load()
        .select("topic", "partition", "value")
        .collect()
    )
    assert sorted((r.topic, r.partition) for r in rows) == sorted(
        [("orders", 0)] * 4 + [("orders", 2)] * 4 + [("refunds", 1)] * 2
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_ending_offsets_by_timestamp(spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        first = produce(store, "orders", 10, queues=2)
        boundary = max(r.store_timestamp_ms for r in first) + 1
        wait_until(lambda: _now_ms() > boundary, 5, "the clock to pass the boundary", poll_s=0.002)
        produce(store, "orders", 10, queues=2, start=10)
    rows = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("subscribe", "orders")
        .option("endingOffsetsByTimestamp", f'{{"orders": {{"0": {boundary}}}}}')  # queue 1: latest
        .option("schema", "kafka")
        .load()
        .select("partition", "value")
        .collect()
    )
    got = sorted((r.partition, bytes(r.value)) for r in rows)
    expected = [(0, b"msg-%d" % i) for i in range(0, 10, 2)] + [(1, b"msg-%d" % i) for i in range(1, 20, 2)]
    assert got == sorted(expected)


class Batches:
    """foreachBatch sink keeping (topic, value) per delivered micro-batch."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, bytes]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted((r.topic, bytes(r.value)) for r in df.select("topic", "value").collect())
        if rows:
            self.batches.append(rows)

    def rows(self) -> list[tuple[str, bytes]]:
        return [row for batch in self.batches for row in batch]


def _start(df: Any, checkpoint: str, sink: Batches) -> Any:
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_subscribe_pattern_picks_up_a_topic_created_after_the_start(
    spark: Any, tmp_path: Path, checkpoint: str
) -> None:
    store_dir = tmp_path / "store"
    sink = Batches()
    with open_store(store_dir) as store:
        produce(store, "orders-eu", 3, queues=2)
        produce(store, "audit", 2, queues=1)
        df = (
            spark.readStream.format("sparkmq")
            .option("path", str(store_dir))
            .option("subscribePattern", "orders-.*")
            .option("startingOffsets", "earliest")
            .option("schema", "kafka")
            .load()
        )
        query = _start(df, checkpoint, sink)
        try:
            wait_until(lambda: len(sink.rows()) >= 3, QUERY_TIMEOUT_S, "orders-eu's rows", poll_s=0.3)
            produce(store, "orders-us", 4, queues=2, start=100)  # created while the query runs
            produce(store, "orders-eu", 1, queues=2, start=200)
            produce(store, "audit", 2, queues=1, start=300)
            wait_until(lambda: len(sink.rows()) >= 8, QUERY_TIMEOUT_S, "the new topic's rows", poll_s=0.3)
        finally:
            query.stop()
    assert query.exception() is None
    assert sorted(sink.rows()) == sorted(
        [("orders-eu", b"msg-%d" % i) for i in (0, 1, 2, 200)]
        + [("orders-us", b"msg-%d" % i) for i in range(100, 104)]
    )


def _reported_head(query: Any) -> int:
    """Sum of the source's reported latest offsets in the last progress (idle steps included)."""
    progress = query.lastProgress
    latest = progress["sources"][0]["latestOffset"] if progress else None
    return sum(json.loads(latest).values()) if latest else 0


def test_min_offsets_per_trigger_waits_for_enough_offsets(
    spark: Any, tmp_path: Path, checkpoint: str
) -> None:
    store_dir = tmp_path / "store"
    sink = Batches()
    with open_store(store_dir) as store:
        produce(store, "orders", 5, queues=2)  # before the start: skipped (latest)
        df = (
            spark.readStream.format("sparkmq")
            .option("path", str(store_dir))
            .option("subscribe", "orders")
            .option("schema", "kafka")
            .option("minOffsetsPerTrigger", "25")
            .option("maxTriggerDelay", "1h")
            .load()
        )
        query = _start(df, checkpoint, sink)
        try:
            wait_until(lambda: query.lastProgress is not None, QUERY_TIMEOUT_S, "the first planning step")
            produce(store, "orders", 10, queues=2, start=100)  # fewer than 25: held back
            # a planning step saw the 10 offsets (reported head: 5 + 10) and ran no batch
            wait_until(lambda: _reported_head(query) >= 15, QUERY_TIMEOUT_S, "a step to see 15", poll_s=0.3)
            assert sink.batches == []
            produce(store, "orders", 20, queues=2, start=200)  # now 30 >= 25: one batch of all
            wait_until(lambda: len(sink.rows()) >= 30, QUERY_TIMEOUT_S, "30 rows", poll_s=0.3)
        finally:
            query.stop()
    assert [len(batch) for batch in sink.batches] == [30]


def test_max_trigger_delay_lets_a_short_batch_through(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    sink = Batches()
    with open_store(store_dir) as store:
        store.create_topic("orders", 2)
        df = (
            spark.readStream.format("sparkmq")
            .option("path", str(store_dir))
            .option("subscribe", "orders")
            .option("schema", "kafka")
            .option("minOffsetsPerTrigger", "1000")
            .option("maxTriggerDelay", "2s")
            .load()
        )
        query = _start(df, checkpoint, sink)
        try:
            wait_until(lambda: query.lastProgress is not None, QUERY_TIMEOUT_S, "the first planning step")
            produce(store, "orders", 10, queues=2, start=100)
            # 10 < 1000 offsets: only the delay running out can deliver them
            wait_until(lambda: len(sink.rows()) >= 10, QUERY_TIMEOUT_S, "the delayed batch", poll_s=0.3)
            produce(store, "orders", 7, queues=2, start=200)
            wait_until(lambda: len(sink.rows()) >= 17, QUERY_TIMEOUT_S, "the next delayed batch", poll_s=0.3)
        finally:
            query.stop()
    assert [len(batch) for batch in sink.batches] == [10, 7]


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("kafka_style_job", ROOT / "examples" / "kafka_style_job.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kafka_style_job_runs_end_to_end(spark: Any, tmp_path: Path, broker_factory: Any) -> None:
    """examples/kafka_style_job.py, unchanged: Kafka's options and columns in, Kafka-shaped rows
    (CAST(key AS STRING), CAST(value AS STRING), headers, a topic column) out, exactly once."""
    register_sink(spark)
    store_dir = tmp_path / "store"
    broker = broker_factory(store_dir)
    client = httpx.Client(base_url=broker.url, timeout=30)
    client.put("/topics/orders", json={"queues": 3})
    client.put("/topics/orders_upper", json={"queues": 3})
    sent = [{"body": f"order {i}", "keys": [f"k{i}"], "properties": {"n": str(i)}} for i in range(40)]
    assert client.post("/topics/orders/messages:batch", json={"messages": sent}).status_code < 300
    address = broker.url.removeprefix("http://")  # host:port, as kafka.bootstrap.servers spells it
    query = _load_example().start(spark, "sparkmq", address, "orders", "orders_upper", str(tmp_path / "ck"))
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None, query.exception()
    out = (
        spark.read.format("sparkmq")
        .option("kafka.bootstrap.servers", address)
        .option("subscribe", "orders_upper")
        .option("schema", "kafka")
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    got = sorted((r.key, r.value, tuple((h.key, h.value) for h in r.headers)) for r in out)
    assert got == sorted((b"k%d" % i, b"ORDER %d" % i, (("n", b"%d" % i),)) for i in range(40))
    # One key, one queue: a keyed row without a partition goes where its key hashes to.
    queues: dict[bytes, set[int]] = {}
    for r in out:
        queues.setdefault(r.key, set()).add(r.partition)
    assert all(len(q) == 1 for q in queues.values())


def test_pattern_query_mirrors_lag_per_group(spark: Any, tmp_path: Path, broker_factory: Any) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders-eu", 6, queues=2)
        produce(store, "orders-us", 4, queues=1)
    broker = broker_factory(store_dir)
    group = f"billing_{uuid.uuid4().hex[:6]}"
    df = (
        spark.readStream.format("sparkmq")
        .option("kafka.bootstrap.servers", broker.url)
        .option("subscribePattern", "orders-.*")
        .option("startingOffsets", "earliest")
        .option("schema", "kafka")
        .option("group", group)
        .load()
    )
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None, query.exception()
    lag = httpx.get(f"{broker.url}/groups/{group}", timeout=30).json()
    per_queue = {(q["topic"], q["queue_id"]): (q["committed_offset"], q["lag"]) for q in lag["queues"]}
    assert per_queue == {("orders-eu", 0): (3, 0), ("orders-eu", 1): (3, 0), ("orders-us", 0): (4, 0)}


def test_sink_writes_kafka_rows_like_the_kafka_door(spark: Any, tmp_path: Path) -> None:
    """Tombstones, binary keys, repeated headers and a DELAY header, batch write, path mode."""
    register_sink(spark)
    store_dir = tmp_path / "store"
    with MessageStore.open(small_config(store_dir)) as ms:
        ms.create_topic("out", 2)
    df = spark.createDataFrame(
        [
            (b"k1", b"v1", [("h", b"1"), ("h", b"2")], 1),
            (b"\xff", None, None, 0),
            (None, b"plain", [("DELAY", b"0")], None),
        ],
        "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, partition INT",
    )
    df.write.format("sparkmq").mode("append").option("path", str(store_dir)).option("topic", "out").save()
    with MessageStore.open(small_config(store_dir)) as ms:
        rows = topic_rows(ms, "out")
    batch = pa.RecordBatch.from_pylist(rows, schema=MESSAGE_SCHEMA)
    columns = batch.column("keys"), batch.column("body"), batch.column("properties")
    view = kafka_view(*columns, with_headers=True)
    assert view.headers is not None
    got = sorted(
        zip(
            [r["queue_id"] for r in rows],
            view.key.to_pylist(),
            view.value.to_pylist(),
            [None if h is None else [(x["key"], x["value"]) for x in h] for h in view.headers.to_pylist()],
            strict=True,
        ),
        key=repr,
    )
    assert got == sorted(
        [
            (1, b"k1", b"v1", [("h", b"1"), ("h", b"2")]),
            (0, b"\xff", None, None),
            (rows[[bytes(r["body"]) for r in rows].index(b"plain")]["queue_id"], None, b"plain", None),
        ],
        key=repr,
    )


def test_mixed_shapes_fail_at_start_naming_the_columns(spark: Any, tmp_path: Path) -> None:
    register_sink(spark)
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "in", 3, queues=1)
    stream = (
        spark.readStream.format("sparkmq").option("path", str(store_dir)).option("topic", "in").load()
        .selectExpr("body AS value", "keys", "'out' AS topic")
    )  # fmt: skip
    query = (
        stream.writeStream.format("sparkmq").option("path", str(store_dir))
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(Exception, match=r"column 'keys': mixes Kafka-shaped columns \(value\) with RocketMQ"):
        query.awaitTermination(QUERY_TIMEOUT_S)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t", "kafka.group.id": "g"}, "option 'kafka.group.id': cannot apply to sparkmq"),
        ({"subscribe": "t", "kafka.security.protocol": "SSL"}, "option 'kafka.security.protocol'"),
        ({"subscribe": "t", "topic": "t"}, "option 'subscribe': set only one of topic, subscribe"),
        ({"subscribe": "t", "maxTriggerDelay": "1m"}, "option 'maxtriggerdelay'|option 'maxTriggerDelay'"),
        ({"subscribe": "t", "subscribepatern": "x"}, "option 'subscribepatern': unknown option"),
    ],
)
def test_kafka_option_refusals_surface_at_load(
    spark: Any, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    reader = spark.readStream.format("sparkmq").option("path", str(tmp_path))
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=message):
        reader.load()
