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
