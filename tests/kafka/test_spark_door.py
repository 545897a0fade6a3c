"""Kafka produce -> Spark read: the Spark source (``path`` mode) sees Kafka records."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from store import MessageStore
from streaming.register import local_session_builder
from tests.kafka.test_confluent import FAST

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()  # e.g. the Spark suite's session: reuse, never stop
    session = (
        local_session_builder("sparkmq-kafka-tests", cores=1)
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if existing is None:
        session.stop()


def test_kafka_records_are_read_by_the_spark_source(spark: Any, bootstrap: str, store: MessageStore) -> None:
    store.create_topic("spark%2Edoor", 2)  # Kafka topic "spark.door"
    producer = Producer({"bootstrap.servers": bootstrap, **FAST})
    for i in range(6):
        producer.produce(
            "spark.door", key=b"k%d" % i, value=b"v%d" % i, headers=[("i", b"%d" % i)], partition=i % 2
        )
    assert producer.flush(10) == 0
    store.flush()
    rows = (
        spark.read.format("sparkmq")
        .option("path", str(store.config.store_dir))
        .option("topic", "spark%2Edoor")
        .load()
        .select("queue_id", "queue_offset", "keys", "body", "properties")
        .collect()
    )
    got = sorted((r.queue_id, r.queue_offset, list(r.keys), bytes(r.body), dict(r.properties)) for r in rows)
    assert got == sorted((i % 2, i // 2, [f"k{i}"], b"v%d" % i, {"i": str(i)}) for i in range(6))


def test_kafka_records_read_with_schema_kafka_as_a_kafka_consumer_sees_them(
    spark: Any, bootstrap: str, store: MessageStore
) -> None:
    """One storage, three doors: what confluent-kafka produced reads back with Spark's Kafka
    columns exactly as a Kafka consumer would see it (binary keys, repeated headers, tombstones)."""
    store.create_topic("door", 2)
    producer = Producer({"bootstrap.servers": bootstrap, **FAST})
    sent = [
        (b"k0", b"v0", [("i", b"0")], 0),
        (b"\xff\xfe", b"v1", [("dup", b"1"), ("dup", b"2"), ("bin", b"\x00\xff")], 1),
        (b"a  b", None, [], 0),  # a tombstone with a key KEYS cannot hold
        (None, b"", [("empty", b"")], 1),
    ]
    for key, value, headers, partition in sent:
        producer.produce("door", key=key, value=value, headers=headers, partition=partition)
    assert producer.flush(10) == 0
    store.flush()
    rows = (
        spark.read.format("sparkmq")
        .option("path", str(store.config.store_dir))
        .option("subscribe", "door")
        .option("schema", "kafka")
        .option("includeHeaders", "true")
        .load()
        .collect()
    )
    got = sorted(
        (
            (
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or ()],
                r.partition,
                r.timestampType,
            )
            for r in rows
        ),
        key=repr,
    )
    assert got == sorted(((k, v, h, p, 0) for k, v, h, p in sent), key=repr)


def test_a_kafka_port_in_bootstrap_servers_is_reported_at_load(spark: Any, bootstrap: str) -> None:
    reader = (
        spark.read.format("sparkmq").option("kafka.bootstrap.servers", bootstrap).option("subscribe", "door")
    )
    with pytest.raises(Exception, match=r"option 'kafka.bootstrap.servers'.*looks like a Kafka port"):
        reader.load()
    writer = (
        spark.range(2).selectExpr("CAST(id AS STRING) AS value").write.format("sparkmq").mode("append")
        .option("kafka.bootstrap.servers", bootstrap).option("topic", "door")
    )  # fmt: skip
    with pytest.raises(Exception, match=r"sink option 'kafka.bootstrap.servers'.*looks like a Kafka port"):
        writer.save()
