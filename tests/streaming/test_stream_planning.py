"""The stream reader's driver-side planning on a real store, without Spark.

Spark calls these methods from one long-lived Python process per query; here they are called
directly in the same order (see ../shared/reference/spark_datasource.md, section 1.6).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from store import DataLost
from streaming.options import parse_options
from streaming.reader import NoOffsetForTimestamp, SparkMQStreamReader
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


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_min_offsets_per_trigger_holds_planning_back_until_enough_or_late(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
        reader = _reader(store_dir, minOffsetsPerTrigger="10", maxTriggerDelay="60s", pollIntervalMs="0")
        assert reader._gate is not None
        clock = reader._gate.clock = FakeClock()
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMinRows(10)
        start = reader.initialOffset()  # latest: nothing waiting
        assert reader.latestOffset(start, limit) == start  # the first step goes through (no data)
        produce(store, "orders", 6, queues=2, start=4)
        clock.now += 30
        assert reader.latestOffset(start, limit) == start  # 6 < 10 and 30 s < 60 s: held back
        produce(store, "orders", 4, queues=2, start=10)
        end = reader.latestOffset(start, limit)  # 10 waiting: one batch of all
        assert sum(end.values()) - sum(start.values()) == 10
        produce(store, "orders", 2, queues=2, start=14)
        clock.now += 59
        assert reader.latestOffset(end, limit) == end
        clock.now += 1  # the delay ran out: the 2 go
        assert sum(reader.latestOffset(end, limit).values()) - sum(end.values()) == 2
        # Trigger.Once passes ReadAllAvailable: never held back
        produce(store, "orders", 2, queues=2, start=16)
        last = reader.latestOffset(end, ReadAllAvailable())
        assert sum(last.values()) - sum(end.values()) == 4


def test_starting_timestamp_strategy_error_fails_where_no_message_matches(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
    future = str(time.time_ns() // 1_000_000 + 3_600_000)
    lenient = _reader(store_dir, startingTimestamp=future)
    assert lenient.initialOffset() == {"orders/0": 2, "orders/1": 2}  # latest, as before
    strict = _reader(store_dir, startingTimestamp=future, startingOffsetsByTimestampStrategy="error")
    with pytest.raises(NoOffsetForTimestamp, match=r"orders/0: no message stored at or after"):
        strict.initialOffset()


def test_max_records_per_partition_splits_tasks(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 100, queues=2)
    reader = _reader(store_dir, startingOffsets="earliest", minPartitions="1", maxRecordsPerPartition="30")
    parts = reader.partitions({"orders/0": 0, "orders/1": 0}, {"orders/0": 50, "orders/1": 50})
    sizes = [sum(r.end - r.start for r in p.ranges) for p in parts]
    assert sizes == [25, 25, 25, 25]


def test_assign_and_pattern_plan_only_their_queues(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders-eu", 6, queues=3)
        produce(store, "audit", 2, queues=1)
        assigned = SparkMQStreamReader(
            parse_options({"path": str(store_dir), "assign": '{"orders-eu": [0, 2], "audit": [5]}'})
        )
        assert set(assigned.initialOffset()) == {"orders-eu/0", "orders-eu/2"}  # audit/5 does not exist yet
        pattern = SparkMQStreamReader(
            parse_options(
                {"path": str(store_dir), "subscribePattern": "orders-.*", "startingOffsets": "earliest"}
            )
        )
        start = pattern.initialOffset()
        assert set(start) == {"orders-eu/0", "orders-eu/1", "orders-eu/2"}
        produce(store, "orders-us", 2, queues=1, start=100)
        end = pattern.latestOffset(start, ReadAllAvailable())
        assert end["orders-us/0"] == 0  # a new topic joins at its earliest offset, read next batch
        assert pattern.latestOffset(end, ReadAllAvailable())["orders-us/0"] == 2


def test_the_clock_brings_a_batch_once_per_interval_and_is_never_read(tmp_path: Path) -> None:
    """``clockIntervalMs``: with no new message the end offsets still move once per interval
    (Spark then runs a batch), and the clock is never planned as a queue to read."""
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
        reader = _reader(store_dir, startingOffsets="earliest", pollIntervalMs="0", clockIntervalMs="200")
        start = reader.initialOffset()
        assert "~clock/0" not in start
        before = int(time.time() * 1000) // 200
        first = reader.latestOffset(start, ReadAllAvailable())
        assert {k: v for k, v in first.items() if k != "~clock/0"} == {"orders/0": 2, "orders/1": 2}
        assert before <= first["~clock/0"] <= int(time.time() * 1000) // 200
        ranges = [(r.queue_id, r.start, r.end) for p in reader.partitions(start, first) for r in p.ranges]
        assert ranges == [(0, 0, 2), (1, 0, 2)]
        time.sleep(0.25)
        idle = reader.latestOffset(first, ReadAllAvailable())
        assert idle != first and idle["~clock/0"] > first["~clock/0"], "a new interval: new offsets"
        assert not [r for p in reader.partitions(first, idle) for r in p.ranges], "no queue has new messages"
        same = reader.latestOffset(idle, ReadAllAvailable())
        if same["~clock/0"] == idle["~clock/0"]:  # within the interval: nothing to run
            assert same == idle
        reader.prepareForTriggerAvailableNow()
        assert "~clock/0" not in reader.latestOffset(idle, ReadAllAvailable()), "AvailableNow runs must end"
    with pytest.raises(Exception, match="clockIntervalMs"):
        _reader(store_dir, clockIntervalMs="-1")


def _mapped_kb(under: Path) -> int:
    """This process's resident kB of the file mappings under ``under`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header
            inside = len(fields) > 5 and fields[5].startswith(str(under))
        elif inside and fields[0] == "Rss:":
            total += int(fields[1])
    return total


def test_looking_up_the_heads_leaves_no_consume_queue_page_mapped(tmp_path: Path) -> None:
    """Spark's source runner lives as long as its query: the ConsumeQueue pages a lookup of the
    queues' heads mapped must not stay in its RSS (the operator job's runners held 19 MB each)."""
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 10_000, queues=2)
    reader = _reader(store_dir, startingOffsets="earliest", pollIntervalMs="0")
    start = reader.initialOffset()
    assert _mapped_kb(store_dir / "consumequeue") > 0, "the lookup reads the ConsumeQueue files"
    assert reader.latestOffset(start, ReadAllAvailable()) == {"orders/0": 5_000, "orders/1": 5_000}
    assert _mapped_kb(store_dir / "consumequeue") == 0
