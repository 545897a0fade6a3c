"""The sparkmq source on a real local Spark over real stores (path mode unless stated)."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyspark.errors import StreamingQueryException

from store import Message
from tests.streaming.conftest import open_store, produce
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180


def _stream(spark: Any, store_dir: Path, topic: str, **options: str) -> Any:
    """A path-mode stream of ``topic`` (a comma-separated ``topics`` list when it has commas)."""
    name = "topics" if "," in topic else "topic"
    reader = spark.readStream.format("sparkmq").option("path", str(store_dir)).option(name, topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_available_now(df: Any, checkpoint: str, name: str | None = None) -> Any:
    """Run to completion with Trigger.AvailableNow into a memory table; returns the query."""
    query = (
        df.writeStream.format("memory")
        .queryName(name or f"q_{uuid.uuid4().hex[:8]}")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT_S), "AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return query


def _rows(spark: Any, table: str) -> list[tuple[int, int, bytes]]:
    return sorted(
        (r.queue_id, r.queue_offset, bytes(r.body))
        for r in spark.table(table).select("queue_id", "queue_offset", "body").collect()
    )


def _data_batches(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


class Collector:
    """foreachBatch sink keeping every delivered batch (replays included) in driver memory."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted(
            (r.queue_id, r.queue_offset, bytes(r.body))
            for r in df.select("queue_id", "queue_offset", "body").collect()
        )
        self.batches.append((batch_id, rows))

    def all_rows(self) -> list[tuple[int, int, bytes]]:
        return [row for _, rows in self.batches for row in rows]


def _run_collect(df: Any, checkpoint: str, collector: Collector) -> Any:
    query = (
        df.writeStream.foreachBatch(collector)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    with contextlib.suppress(StreamingQueryException):  # the caller inspects query.exception()
        assert query.awaitTermination(QUERY_TIMEOUT_S), "AvailableNow query did not finish"
    return query


# -- AvailableNow, rate limit ------------------------------------------------------------------


def test_available_now_drains_exactly(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 1000, queues=4)
    name = "drain_exact"
    _run_available_now(_stream(spark, store_dir, "orders", startingOffsets="earliest"), checkpoint, name)
    rows = _rows(spark, name)
    assert len(rows) == 1000
    assert len({(q, o) for q, o, _ in rows}) == 1000
    assert sorted(body for _, _, body in rows) == sorted(f"msg-{i}".encode() for i in range(1000))
    full = spark.table(name).where("queue_id = 1 AND queue_offset = 0").collect()[0]
    assert full.topic == "orders"
    assert full.body == b"msg-1"
    assert full.keys == ["k1"]
    assert full.msg_id
    assert full.uniq_key
    assert full.store_timestamp is not None


def test_rate_limit_splits_into_expected_batches(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 7, queues=2)  # queue 0: 4 messages, queue 1: 3
        produce(store, "other", 3, queues=1)
    df = (
        spark.readStream.format("sparkmq")
        .option("path", str(store_dir))
        .option("topics", "orders,other")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "4")
        .load()
    )
    query = _run_available_now(df, checkpoint, "rate_limit")
    assert _data_batches(query) == [4, 4, 2]
    assert len(_rows(spark, "rate_limit")) == 10
    last = query.lastProgress["sources"][0]
    # Offsets are JSON text with string keys in a fixed order.
    assert last["endOffset"] == '{"orders/0": 4, "orders/1": 3, "other/0": 3}'
    # reportLatestOffset: progress shows the head so users see how far behind they are.
    assert json.loads(last["latestOffset"]) == {"orders/0": 4, "orders/1": 3, "other/0": 3}


# -- a running stream ---------------------------------------------------------------------------


def test_stream_picks_up_messages_produced_while_running(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "live", 5, queues=2)  # before the start: skipped (startingOffsets=latest)
        name = "live_rows"
        query = (
            _stream(spark, store_dir, "live,late")
            .writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        try:
            wait_until(lambda: query.lastProgress is not None, QUERY_TIMEOUT_S, "the first (empty) batch")
            produce(store, "live", 20, queues=2, start=100)
            wait_until(lambda: len(_rows(spark, name)) >= 20, QUERY_TIMEOUT_S, "20 live rows", poll_s=0.5)
            store.create_topic("live", 3)  # a queue added while running starts at its earliest
            produce(store, "live", 9, queues=3, start=200)
            produce(store, "late", 4, queues=2, start=300)  # a topic created while running, too
            wait_until(lambda: len(_rows(spark, name)) >= 33, QUERY_TIMEOUT_S, "33 live rows", poll_s=0.5)
        finally:
            query.stop()
        rows = _rows(spark, name)
    expected = [*range(100, 120), *range(200, 209), *range(300, 304)]
    assert sorted(body for _, _, body in rows) == sorted(f"msg-{i}".encode() for i in expected)
    assert {q for q, _, _ in rows} == {0, 1, 2}


# -- restart -----------------------------------------------------------------------------------


def test_restart_from_checkpoint_no_gap_no_duplicate(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 25, queues=3)
    df = _stream(spark, store_dir, "orders", startingOffsets="earliest", maxMessagesPerTrigger="10")
    first = Collector()
    _run_collect(df, checkpoint, first)
    assert [len(rows) for _, rows in first.batches] == [10, 10, 5]
    with open_store(store_dir) as store:
        produce(store, "orders", 15, queues=3, start=25)
    # Forget that the last batch was committed: Spark must replay it from the offset log.
    last_batch = first.batches[-1][0]
    (Path(checkpoint) / "commits" / str(last_batch)).unlink()
    (Path(checkpoint) / "commits" / f".{last_batch}.crc").unlink(missing_ok=True)
    second = Collector()
    _run_collect(df, checkpoint, second)
    replay_id, replay_rows = second.batches[0]
    assert replay_id == last_batch
    assert replay_rows == first.batches[-1][1], "a replayed batch must return identical rows"
    delivered = first.all_rows() + [row for batch_id, rows in second.batches[1:] for row in rows]
    assert len(delivered) == 40 == len(set(delivered))
    per_queue: dict[int, list[int]] = {}
    for queue_id, offset, _ in delivered:
        per_queue.setdefault(queue_id, []).append(offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets))), "gap in a queue"


# -- tags, timestamps --------------------------------------------------------------------------


def test_tags_filter(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    kinds = ["paid", "refunded", "other", None]
    with open_store(store_dir) as store:
        produce(store, "orders", 40, queues=3, tags=lambda i: kinds[i % 4])
    batch = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "orders")
        .option("tags", "paid || refunded")
        .load()
    )
    tags = [r.tags for r in batch.select("tags").collect()]
    assert sorted(tags) == sorted(["paid"] * 10 + ["refunded"] * 10)
    name = "tag_stream"
    _run_available_now(
        _stream(spark, store_dir, "orders", startingOffsets="earliest", tags="other"), checkpoint, name
    )
    assert [r.tags for r in spark.table(name).select("tags").collect()] == ["other"] * 10


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_starting_timestamp_and_batch_time_window(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        first = produce(store, "orders", 10, queues=2)
        boundary_1 = max(r.store_timestamp_ms for r in first) + 1
        wait_until(lambda: _now_ms() > boundary_1, 5, "the clock to pass the first boundary", poll_s=0.002)
        second = produce(store, "orders", 10, queues=2, start=10)
        boundary_2 = max(r.store_timestamp_ms for r in second) + 1
        wait_until(lambda: _now_ms() > boundary_2, 5, "the clock to pass the second boundary", poll_s=0.002)
        produce(store, "orders", 10, queues=2, start=20)
    name = "from_ts"
    _run_available_now(
        _stream(spark, store_dir, "orders", startingTimestamp=str(boundary_1)), checkpoint, name
    )
    assert sorted(body for _, _, body in _rows(spark, name)) == sorted(
        f"msg-{i}".encode() for i in range(10, 30)
    )
    window = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "orders")
        .option("startingTimestamp", str(boundary_1))
        .option("endingTimestamp", str(boundary_2))
        .load()
    )
    assert sorted(bytes(r.body) for r in window.select("body").collect()) == sorted(
        f"msg-{i}".encode() for i in range(10, 20)
    )
    explicit = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "orders")
        .option("startingOffsets", '{"orders": {"0": 5}}')
        .option("endingOffsets", '{"orders": {"0": 7, "1": 1}}')
        .load()
    )
    assert sorted((r.queue_id, r.queue_offset) for r in explicit.collect()) == [(0, 5), (0, 6), (1, 0)]
    by_queue_time = (
        spark.read.format("sparkmq")
        .option("path", str(store_dir))
        .option("topic", "orders")
        .option("startingOffsetsByTimestamp", json.dumps({"orders": {"0": boundary_2}}))
        .load()
    )
    counts = {r.queue_id: r["count"] for r in by_queue_time.groupBy("queue_id").count().collect()}
    assert counts == {0: 5, 1: 15}  # queue 0 from the third round on, queue 1 from its earliest


# -- path vs endpoint, group mirror -------------------------------------------------------------


def test_path_and_endpoint_give_the_same_rows(spark: Any, tmp_path: Path, broker_factory: Any) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 300, queues=4, tags=lambda i: "paid" if i % 3 else "other")
    broker = broker_factory(store_dir)

    def read_all(**location: str) -> list[tuple[Any, ...]]:
        reader = spark.read.format("sparkmq").option("topic", "orders").option("tags", "paid")
        for key, value in location.items():
            reader = reader.option(key, value)
        return sorted(tuple(r) for r in reader.load().collect())

    via_path = read_all(path=str(store_dir))
    via_http = read_all(endpoint=broker.url, readChunkMessages="37")
    assert len(via_path) == 200
    assert via_http == via_path


def test_group_offsets_mirrored_and_lag_visible_path_mode(
    spark: Any, tmp_path: Path, checkpoint: str
) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 20, queues=2)
    # No process owns the directory: the driver mirrors by briefly opening the store.
    df = _stream(
        spark, store_dir, "orders", startingOffsets="earliest", maxMessagesPerTrigger="7", group="billing"
    )
    query = _run_available_now(df, checkpoint)
    assert _data_batches(query) == [7, 7, 6]
    with open_store(store_dir) as store:
        assert store.committed_offsets("billing", "orders") == {0: 10, 1: 10}
        assert store.lag("billing", "orders") == {0: 0, 1: 0}
        produce(store, "orders", 6, queues=2, start=20)
        assert store.lag("billing", "orders") == {0: 3, 1: 3}


def test_group_offsets_mirrored_and_lag_visible_endpoint_mode(
    spark: Any, tmp_path: Path, checkpoint: str, broker_factory: Any
) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 12, queues=3)
    broker = broker_factory(store_dir)
    df = (
        spark.readStream.format("sparkmq")
        .option("endpoint", broker.url)
        .option("topic", "orders")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "5")
        .option("group", "billing")
        .load()
    )
    query = _run_available_now(df, checkpoint)
    assert _data_batches(query) == [5, 5, 2]
    lag = httpx.get(f"{broker.url}/groups/billing/lag", params={"topic": "orders"}).json()
    assert lag["total_lag"] == 0
    assert {q["queue_id"]: q["committed_offset"] for q in lag["queues"]} == {0: 4, 1: 4, 2: 4}
    resp = httpx.post(f"{broker.url}/topics/orders/messages", json={"body": "late", "queue_id": 1})
    assert resp.status_code == 201
    lag = httpx.get(f"{broker.url}/groups/billing/lag", params={"topic": "orders"}).json()
    assert lag["total_lag"] == 1


# -- data loss ---------------------------------------------------------------------------------


def test_fail_on_data_loss_both_ways_after_retention(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    small = {"commitlog_file_size_bytes": 4096}
    with open_store(store_dir, **small) as store:
        produce(store, "orders", 10, queues=1)
    df_strict = _stream(spark, store_dir, "orders", startingOffsets="earliest")
    first = Collector()
    _run_collect(df_strict, checkpoint, first)
    assert len(first.all_rows()) == 10
    with open_store(store_dir, **small) as store:
        produce(store, "orders", 200, queues=1, start=10)
        # Every CommitLog file but the one being written is older than the retention period then.
        later_ms = _now_ms() + 100 * 3_600_000
        assert store.run_retention(now_ms=later_ms, force=True) > 0
        earliest = store.min_offset("orders", 0)
    assert earliest > 10, "retention must have removed offsets the query has not read"
    lenient_checkpoint = str(tmp_path / "lenient")
    shutil.copytree(checkpoint, lenient_checkpoint)

    strict = Collector()
    query = _run_collect(df_strict, checkpoint, strict)
    assert query.exception() is not None
    assert "DataLost" in str(query.exception()) or "failOnDataLoss" in str(query.exception())
    assert strict.all_rows() == []

    lenient = Collector()
    df_lenient = _stream(spark, store_dir, "orders", startingOffsets="earliest", failOnDataLoss="false")
    query = _run_collect(df_lenient, lenient_checkpoint, lenient)
    assert query.exception() is None
    assert [offset for _, offset, _ in lenient.all_rows()] == list(range(earliest, 210))


# -- options at start, delayed / half messages ---------------------------------------------------


def test_stream_only_and_batch_only_options_fail_clearly(spark: Any, tmp_path: Path, checkpoint: str) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    df = _stream(spark, store_dir, "orders", endingOffsets="latest")
    with pytest.raises(Exception, match="option 'endingOffsets'"):
        df.writeStream.format("noop").option("checkpointLocation", checkpoint).start().awaitTermination(60)
    batch = spark.read.format("sparkmq").option("path", str(store_dir)).option("topic", "orders")
    with pytest.raises(Exception, match="option 'maxMessagesPerTrigger'"):
        batch.option("maxMessagesPerTrigger", "5").load().collect()


def test_delayed_and_half_messages_are_not_delivered_early(
    spark: Any, tmp_path: Path, checkpoint: str
) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        store.create_topic("orders", 2)
        store.put_message(Message(topic="orders", body=b"now-1", queue_id=0))
        delayed = store.put_message(Message(topic="orders", body=b"later", queue_id=0, delay_level=18))
        soon = store.put_message(Message(topic="orders", body=b"soon", queue_id=1, delay_level=1))
        half = store.put_message(
            Message(topic="orders", body=b"uncommitted", queue_id=1, transaction_prepared=True)
        )
        store.put_message(Message(topic="orders", body=b"now-2", queue_id=1))
        assert {delayed.topic, soon.topic, half.topic}.isdisjoint({"orders"})
        name = "no_early"
        _run_available_now(_stream(spark, store_dir, "orders", startingOffsets="earliest"), checkpoint, name)
        assert sorted(body for _, _, body in _rows(spark, name)) == [b"now-1", b"now-2"]
        # The real topic's queues did not move: nothing can be planned past them.
        assert store.queue_offsets("orders") == {0: (0, 1), 1: (0, 1)}
