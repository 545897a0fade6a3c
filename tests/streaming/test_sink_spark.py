"""The sparkmq sink on a real local Spark: columns, batch writes, modes, refusals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from store import MessageStore
from tests.streaming.eo_helpers import (
    assert_exactly_once,
    fill_source,
    kill_group,
    reader_bodies,
    register_sink,
    run_to_end,
    small_config,
    start_broker,
    topic_rows,
)
from tests.support.network import free_port

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sink_spark(spark: Any) -> Any:
    register_sink(spark)
    return spark


def _staging_left(store_dir: Path) -> list[str]:
    root = store_dir / "staging"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_stream_writes_every_column(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    fill_source(store_dir, "in", 400)
    with MessageStore.open(small_config(store_dir)) as ms:
        ms.create_topic("out", 4)
    df = (
        sink_spark.readStream.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "in")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "150")
        .load()
        .selectExpr(
            "CAST(body AS STRING) AS body",  # string bodies are accepted too
            "IF(queue_id = 0, 'zero', NULL) AS topic",  # per-row topic, else the option
            "CONCAT('q', CAST(queue_id AS STRING)) AS tags",
            "array(uniq_key, 'k') AS keys",
            "map('origin', msg_id) AS properties",
            "IF(queue_id = 1, CAST(3 AS BIGINT), NULL) AS queue_id",
            "IF(queue_id = 2, uniq_key, NULL) AS sharding_key",
        )
    )
    query = (
        df.writeStream.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "out")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == 3

    with MessageStore.open(small_config(store_dir)) as ms:
        source = {r["uniq_key"]: r for r in topic_rows(ms, "in")}
        out = topic_rows(ms, "out") + topic_rows(ms, "zero")
    assert_exactly_once([bytes(r["body"]) for r in out], [bytes(r["body"]) for r in source.values()])
    for row in out:
        origin = source[row["keys"][0]]
        assert row["keys"] == [origin["uniq_key"], "k"]
        assert row["tags"] == f"q{origin['queue_id']}"
        assert dict(row["properties"])["origin"] == origin["msg_id"]
        assert row["topic"] == ("zero" if origin["queue_id"] == 0 else "out")
        if origin["queue_id"] == 1:
            assert row["queue_id"] == 3
    assert _staging_left(store_dir) == [f"q-{query.id}/STATE.json"]


def test_batch_write_path_mode_and_rerun_with_fixed_ids(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    fill_source(store_dir, "in", 10)
    df = sink_spark.range(5000, numPartitions=3).selectExpr("CAST(id AS STRING) AS body")
    df.write.format("sparkmq").mode("append").option("path", str(store_dir)).option("topic", "b").save()
    expected = [str(i).encode() for i in range(5000)]
    assert_exactly_once(reader_bodies(store_dir, "b"), expected)
    # A job re-run with the same sinkId/batchId (e.g. a retried Airflow task) writes nothing twice.
    for _ in range(2):
        (
            df.write.format("sparkmq").mode("append").option("path", str(store_dir))
            .option("topic", "c").option("sinkId", "nightly-2026-11-21").option("batchId", "0").save()
        )  # fmt: skip
    assert_exactly_once(reader_bodies(store_dir, "c"), expected)


@pytest.mark.parametrize(
    ("select", "options", "message"),
    [
        ("CAST(id AS STRING) AS payload", {"topic": "t"}, "column 'body': is required"),
        ("id AS body", {"topic": "t"}, "column 'body': has type bigint; expected binary or string"),
        ("CAST(id AS STRING) AS body, id AS keys", {"topic": "t"}, "column 'keys': has type bigint"),
        ("CAST(id AS STRING) AS body, 1 AS bodyy", {"topic": "t"}, "column 'bodyy': is not a column"),
        ("CAST(id AS STRING) AS body", {}, "option 'topic': is required unless"),
        ("CAST(id AS STRING) AS body", {"topic": "t", "colour": "x"}, "option 'colour': unknown"),
    ],
)
def test_bad_input_fails_at_start_naming_the_column(
    sink_spark: Any, tmp_path: Path, select: str, options: dict[str, str], message: str
) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    writer = sink_spark.range(3).selectExpr(*select.split(", ")).write.format("sparkmq").mode("append")
    for key, value in {"path": str(store_dir), **options}.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message.replace("(", r"\(")):
        writer.save()


def test_overwrite_and_streaming_refusals(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    fill_source(store_dir, "in", 10)
    df = sink_spark.range(3).selectExpr("CAST(id AS STRING) AS body")
    with pytest.raises(Exception, match="append-only"):
        df.write.format("sparkmq").mode("overwrite").options(path=str(store_dir), topic="t").save()
    stream = (
        sink_spark.readStream.format("sparkmq").option("path", str(store_dir)).option("topic", "in").load()
        .selectExpr("queue_offset AS body")
    )  # fmt: skip
    query = (
        stream.writeStream.format("sparkmq").option("path", str(store_dir)).option("topic", "t")
        .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start()
    )  # fmt: skip
    with pytest.raises(Exception, match="column 'body': has type bigint"):
        query.awaitTermination(120)


def test_path_mode_refuses_a_store_owned_by_a_broker(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    fill_source(store_dir, "in", 10)
    broker = start_broker(store_dir, free_port(), tmp_path / "broker.log")
    try:
        df = sink_spark.range(3).selectExpr("CAST(id AS STRING) AS body")
        with pytest.raises(Exception, match=r"owned by another process.*option\('endpoint'"):
            df.write.format("sparkmq").mode("append").options(path=str(store_dir), topic="t").save()
    finally:
        kill_group(broker)


def test_endpoint_mode_stream_and_batch(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", 3000)
    port = free_port()
    broker = start_broker(store_dir, port, tmp_path / "broker.log")
    endpoint = f"http://127.0.0.1:{port}"
    try:
        spec = {
            "source": {"endpoint": endpoint, "topic": "in", "startingOffsets": "earliest",
                       "maxMessagesPerTrigger": "1000"},
            "sink": "sparkmq",
            "sink_options": {"endpoint": endpoint, "topic": "out", "partMaxBytes": "20000"},
            "checkpoint": str(tmp_path / "ck"),
            "shuffle": True,
        }  # fmt: skip
        assert run_to_end(sink_spark, spec) == []
        (
            sink_spark.range(100).selectExpr("CAST(id AS STRING) AS body").write.format("sparkmq")
            .mode("append").option("endpoint", endpoint).option("topic", "b").save()
        )  # fmt: skip
        assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
        assert_exactly_once(reader_bodies(store_dir, "b"), [str(i).encode() for i in range(100)])
        import httpx

        sinks = [p.name for p in (store_dir / "staging").iterdir()]
        described = httpx.get(f"{endpoint}/sinks/{next(s for s in sinks if s.startswith('q-'))}").json()
        assert described["last_published_batch"] == 2
        assert described["pending"] == []
    finally:
        kill_group(broker)
