"""The stream reader's driver-side planning on a real store, without Spark.

Spark calls these methods from one long-lived Python process per query; here they are called
directly in the same order (see ../shared/reference/spark_datasource.md, section 1.6).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from store import DataLost
from streaming.options import parse_options
from streaming.reader import SparkMQStreamReader
from tests.streaming.conftest import open_store, produce

SMALL_COMMITLOG = {"commitlog_file_size_bytes": 4096}


def _reader(store_dir: Path, **options: str) -> SparkMQStreamReader:
    opts = parse_options({"path": str(store_dir), "topic": "orders", **options}).validate_for_stream()
    return SparkMQStreamReader(opts)


def test_initial_offset_is_stable_and_latest_by_default(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 6, queues=3)
        reader = _reader(store_dir)
        first = reader.initialOffset()
        produce(store, "orders", 3, queues=3, start=6)
        assert reader.initialOffset() == first == {"orders/0": 2, "orders/1": 2, "orders/2": 2}


def test_new_queue_is_registered_at_its_earliest_before_it_is_read(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
        reader = _reader(store_dir, startingOffsets="earliest", pollIntervalMs="0")
        start = reader.initialOffset()
        store.create_topic("orders", 3)
        produce(store, "orders", 3, queues=3, start=4)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"orders/0": 3, "orders/1": 3, "orders/2": 0}
        assert [(r.queue_id, r.start, r.end) for p in reader.partitions(start, end) for r in p.ranges] == [
            (0, 0, 3),
            (1, 0, 3),
        ]
        after = reader.latestOffset(end, ReadAllAvailable())
        assert after == {"orders/0": 3, "orders/1": 3, "orders/2": 1}


def test_available_now_never_plans_past_its_target(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 10, queues=2)
        reader = _reader(store_dir, startingOffsets="earliest", maxMessagesPerTrigger="4", pollIntervalMs="0")
        reader.prepareForTriggerAvailableNow()
        start = reader.initialOffset()
        produce(store, "orders", 10, queues=2, start=10)  # arrives after the run started
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMaxRows(4)
        sizes = []
        while True:
            end = reader.latestOffset(start, limit)
            if end == start:
                break
            sizes.append(sum(end.values()) - sum(start.values()))
            start = end
        assert sizes == [4, 4, 2]
        assert start == {"orders/0": 5, "orders/1": 5}
        assert reader.reportLatestOffset() == {"orders/0": 10, "orders/1": 10}


def test_a_cached_head_is_never_mistaken_for_a_reset_queue(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=1)
        reader = _reader(store_dir, startingOffsets="earliest", pollIntervalMs="600000")
        start = reader.initialOffset()
        assert reader.latestOffset(start, ReadAllAvailable()) == {"orders/0": 4}
        produce(store, "orders", 4, queues=1, start=4)
        # A start beyond the cached head forces a fresh look instead of a data-loss error.
        assert reader.latestOffset({"orders/0": 6}, ReadAllAvailable()) == {"orders/0": 8}


def test_data_loss_after_retention_fails_or_skips(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir, **SMALL_COMMITLOG) as store:
        produce(store, "orders", 200, queues=1)
        assert store.run_retention(now_ms=time.time_ns() // 1_000_000 + 100 * 3_600_000, force=True) > 0
        earliest = store.min_offset("orders", 0)
    assert earliest > 0
    strict = _reader(store_dir, startingOffsets="earliest")
    with pytest.raises(DataLost, match=r"orders/0: next offset 3 is below the earliest available"):
        strict.latestOffset({"orders/0": 3}, ReadAllAvailable())
    lenient = _reader(store_dir, failOnDataLoss="false")
    assert lenient.latestOffset({"orders/0": 3}, ReadMaxRows(10)) == {"orders/0": earliest + 10}
    # Reading the logged range skips what is gone (the lenient reader warns instead of failing).
    rows = [
        offset
        for part in lenient.partitions({"orders/0": 3}, {"orders/0": earliest + 10})
        for batch in lenient.read(part)
        for offset in batch.column("queue_offset").to_pylist()
    ]
    assert rows == list(range(earliest, earliest + 10))
    (first_part, *_) = strict.partitions({"orders/0": 3}, {"orders/0": earliest + 10})
    with pytest.raises(DataLost, match="failOnDataLoss=false"):
        list(strict.read(first_part))


def test_latest_offset_mirrors_the_durable_start(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 6, queues=2)
    reader = _reader(store_dir, startingOffsets="earliest", group="billing", groupCommitIntervalMs="600000")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(4))  # the first write goes out at once
    assert end == {"orders/0": 2, "orders/1": 2}
    with open_store(store_dir) as store:
        assert store.committed_offsets("billing", "orders") == {0: 0, 1: 0}
    # Planning batch 1 means batch 0 is committed; still behind, so within the interval: deferred.
    second = reader.latestOffset(end, ReadMaxRows(4))
    assert second == {"orders/0": 3, "orders/1": 3}
    with open_store(store_dir) as store:
        assert store.committed_offsets("billing", "orders") == {0: 0, 1: 0}
    # Caught up (nothing left to plan): the durable position is written regardless of the interval.
    assert reader.latestOffset(second, ReadMaxRows(4)) == second
    with open_store(store_dir) as store:
        assert store.committed_offsets("billing", "orders") == {0: 3, 1: 3}
