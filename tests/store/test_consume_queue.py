"""One ConsumeQueue: golden 20-byte units, file roll and reopen, idempotent puts, torn-unit
recovery, followers' reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.commitlog.dispatch_batch import DispatchBatch
from store.consumequeue.consume_queue import ConsumeQueue
from store.consumequeue.queue_store import ConsumeQueueStore
from store.consumequeue.units import (
    BLANK_UNIT_SIZE,
    CQ_UNIT_DTYPE,
    CQ_UNIT_SIZE,
    decode_unit,
    decode_units,
    encode_unit,
    encode_units,
)
from store.errors import InvalidArgument, StoreError
from store.types import Boundary

I64 = np.int64
I32 = np.int32
STEP = 100  # fake CommitLog: message i sits at offset i * STEP with size STEP


def put_range(cq: ConsumeQueue, start: int, count: int) -> int:
    q = np.arange(start, start + count, dtype=I64)
    return cq.put_units(q, q * STEP, np.full(count, STEP, dtype=I32), q * 7)


def files_of(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# Codec ---------------------------------------------------------------------------------------
def test_golden_unit() -> None:
    # offset 0x0102030405060708, size 0x0A0B0C0D, tagsCode -2, big-endian, written by hand.
    expected = bytes.fromhex("0102030405060708 0a0b0c0d fffffffffffffffe")
    assert encode_unit(0x0102030405060708, 0x0A0B0C0D, -2) == expected
    assert decode_unit(expected) == (0x0102030405060708, 0x0A0B0C0D, -2)
    view = decode_units(expected)
    assert view.dtype == CQ_UNIT_DTYPE
    assert (int(view["offset"][0]), int(view["size"][0]), int(view["tags_code"][0])) == (
        0x0102030405060708,
        0x0A0B0C0D,
        -2,
    )
    assert CQ_UNIT_SIZE == 20


units_strategy = st.lists(
    st.tuples(
        st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
    ),
    max_size=20,
)


@given(units_strategy)
def test_codec_round_trip(units: list[tuple[int, int, int]]) -> None:
    scalar = b"".join(encode_unit(*u) for u in units)
    columns = encode_units(
        np.array([u[0] for u in units], dtype=I64),
        np.array([u[1] for u in units], dtype=I32),
        np.array([u[2] for u in units], dtype=I64),
    )
    assert columns.tobytes() == scalar
    assert [decode_unit(scalar, i * CQ_UNIT_SIZE) for i in range(len(units))] == units


# Files ---------------------------------------------------------------------------------------
def test_files_roll_and_reopen(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert (cq.min_offset, cq.max_offset) == (0, 0)
    assert put_range(cq, 0, 10) == 10
    assert files_of(tmp_path / "q") == [f"{0:020d}", f"{80:020d}", f"{160:020d}"]
    assert all(p.stat().st_size == 80 for p in (tmp_path / "q").iterdir())
    units = cq.read_units(2, 7)  # spans three files
    assert units["offset"].tolist() == [i * STEP for i in range(2, 9)]
    assert cq.get_unit(9) == (900, STEP, 63)
    assert cq.get_unit(10) is None
    cq.flush()
    cq.close()
    again = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert (again.min_offset, again.max_offset) == (0, 10)
    assert again.read_units(0, 100)["tags_code"].tolist() == [i * 7 for i in range(10)]
    raw = (tmp_path / "q" / f"{80:020d}").read_bytes()
    assert raw[:20] == encode_unit(400, STEP, 28)


def test_read_units_is_a_read_only_view_inside_one_file(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=8)
    put_range(cq, 0, 6)
    units = cq.read_units(1, 3)
    assert len(units) == 3
    assert units.base is not None
    assert not units.flags.writeable
    assert len(cq.read_units(6, 10)) == 0
    assert len(cq.read_units(-1, 10)) == 0
    cq.close()  # a live view must not break close
    assert units["offset"].tolist() == [100, 200, 300]


def test_put_is_idempotent_and_refuses_gaps(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(cq, 0, 5)
    assert put_range(cq, 0, 5) == 0
    assert put_range(cq, 3, 4) == 2  # 3, 4 skipped; 5, 6 written
    assert cq.max_offset == 7
    with pytest.raises(InvalidArgument, match="gap"):
        put_range(cq, 8, 1)
    with pytest.raises(InvalidArgument, match="consecutive"):
        cq.put_units(np.array([7, 9], dtype=I64), np.zeros(2, I64), np.ones(2, I32), np.zeros(2, I64))
    assert cq.max_offset == 7


def test_fresh_queue_may_start_mid_file(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(cq, 6, 3)
    assert files_of(tmp_path / "q") == [f"{80:020d}", f"{160:020d}"]
    assert (cq.min_offset, cq.max_offset) == (6, 9)
    raw = (tmp_path / "q" / f"{80:020d}").read_bytes()
    assert raw[:40] == encode_unit(0, BLANK_UNIT_SIZE, 0) * 2
    cq.close()
    again = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert (again.min_offset, again.max_offset) == (6, 9)
    assert again.read_units(5, 10)["offset"].tolist() == []
    assert again.read_units(6, 10)["offset"].tolist() == [600, 700, 800]


def test_truncate_dirty(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(cq, 0, 10)
    assert cq.truncate_dirty(10 * STEP) == 10
    assert cq.truncate_dirty(5 * STEP + 50) == 5  # unit 5 ends at 600 > 550
    assert "cut from max offset 10 to 5, 1 file(s) deleted (units end beyond" in caplog.text
    assert files_of(tmp_path / "q") == [f"{0:020d}", f"{80:020d}"]
    cq.close()
    again = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert again.max_offset == 5
    assert put_range(again, 5, 2) == 2
    assert again.truncate_dirty(0) == 0
    assert files_of(tmp_path / "q") == [f"{0:020d}"]  # kept, zeroed: reopening agrees
    again.close()
    again = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert (again.min_offset, again.max_offset) == (0, 0)
    assert put_range(again, 0, 1) == 1


def test_recover_stops_at_first_torn_unit(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(cq, 0, 10)
    cq.close()
    path = tmp_path / "q" / f"{80:020d}"
    data = bytearray(path.read_bytes())
    data[2 * 20 + 8 : 2 * 20 + 12] = b"\x00\x00\x00\x00"  # unit 6: size 0
    path.write_bytes(bytes(data))
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert cq.recover() == 6
    assert files_of(tmp_path / "q") == [f"{0:020d}", f"{80:020d}"]
    assert path.read_bytes()[6 * 20 - 80 :] == bytes(40)  # unit 7 cleared too
    assert put_range(cq, 6, 1) == 1


def test_delete_files_below_moves_min(tmp_path: Path) -> None:
    cq = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(cq, 0, 10)
    assert cq.delete_files_below(450) == 1  # file 0 ends at offset 300; file 1 at 700
    assert files_of(tmp_path / "q") == [f"{80:020d}", f"{160:020d}"]
    assert cq.min_offset == 5
    assert cq.delete_files_below(10_000) == 1  # never the last file
    assert (cq.min_offset, cq.max_offset) == (10, 10)
    cq.close()
    again = ConsumeQueue(tmp_path / "q", units_per_file=4)
    assert (again.min_offset, again.max_offset) == (8, 10)
    assert again.correct_min_offset(10_000) == 10


def test_read_only_mode_follows_a_writer(tmp_path: Path) -> None:
    writer = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(writer, 0, 3)
    reader = ConsumeQueue(tmp_path / "q", units_per_file=4, read_only=True)
    assert reader.max_offset == 3
    with pytest.raises(StoreError, match="read-only"):
        put_range(reader, 3, 1)
    put_range(writer, 3, 6)
    assert reader.refresh() == 9
    assert reader.read_units(0, 100)["offset"].tolist() == [i * STEP for i in range(9)]
    writer.delete_files_below(500)
    reader.refresh()
    assert reader.min_offset == 4
    assert reader.read_units(4, 1)["offset"].tolist() == [400]


def test_read_only_scan_stops_at_unpublished_unit(tmp_path: Path) -> None:
    writer = ConsumeQueue(tmp_path / "q", units_per_file=8)
    put_range(writer, 0, 5)
    writer.close()
    path = tmp_path / "q" / f"{0:020d}"
    data = bytearray(path.read_bytes())
    data[3 * 20 + 8 : 3 * 20 + 12] = bytes(4)  # unit 3 written except its size field
    path.write_bytes(bytes(data))
    reader = ConsumeQueue(tmp_path / "q", units_per_file=8, read_only=True)
    assert reader.max_offset == 3


def test_read_only_missing_directory(tmp_path: Path) -> None:
    reader = ConsumeQueue(tmp_path / "absent", units_per_file=4, read_only=True)
    assert (reader.min_offset, reader.max_offset, reader.refresh()) == (0, 0, 0)
    assert not (tmp_path / "absent").exists()


# Offset by timestamp -------------------------------------------------------------------------
StoreTsOf = Callable[[npt.NDArray[np.int64], npt.NDArray[np.int32]], npt.NDArray[np.int64]]


def queue_with_timestamps(
    tmp_path: Path, timestamps: list[int], units_per_file: int = 4
) -> tuple[ConsumeQueue, StoreTsOf]:
    cq = ConsumeQueue(tmp_path / "ts", units_per_file=units_per_file)
    put_range(cq, 0, len(timestamps))
    ts = np.array(timestamps, dtype=I64)

    def store_ts_of(offsets: npt.NDArray[np.int64], sizes: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
        assert (sizes == STEP).all()
        return ts[offsets // STEP]

    return cq, store_ts_of


def reference_lower(ts: list[int], t: int, first: int) -> int:
    return next((i for i in range(first, len(ts)) if ts[i] >= t), len(ts))


def reference_upper(ts: list[int], t: int, first: int) -> int:
    return max((i for i in range(first, len(ts)) if ts[i] <= t), default=first - 1)


def test_timestamp_search_edges(tmp_path: Path) -> None:
    cq, ts_of = queue_with_timestamps(tmp_path, [10, 20, 20, 20, 20, 20, 20, 30, 40])

    def lower(t: int) -> int:
        return cq.offset_for_timestamp(t, Boundary.LOWER, ts_of)

    def upper(t: int) -> int:
        return cq.offset_for_timestamp(t, Boundary.UPPER, ts_of)

    assert (lower(5), upper(5)) == (0, -1)  # before the first
    assert (lower(10), upper(10)) == (0, 0)
    assert (lower(20), upper(20)) == (1, 6)  # many messages in one ms
    assert (lower(25), upper(25)) == (7, 6)
    assert (lower(40), upper(40)) == (8, 8)
    assert (lower(41), upper(41)) == (9, 8)  # after the last: max offset / last offset


def test_timestamp_search_empty_queue(tmp_path: Path) -> None:
    cq, ts_of = queue_with_timestamps(tmp_path, [])
    assert cq.offset_for_timestamp(5, Boundary.LOWER, ts_of) == 0
    assert cq.offset_for_timestamp(5, Boundary.UPPER, ts_of) == -1


def test_timestamp_search_after_deletion(tmp_path: Path) -> None:
    cq, ts_of = queue_with_timestamps(tmp_path, [1, 1, 2, 2, 3, 3, 3, 3, 4, 5])
    cq.delete_files_below(450)
    assert cq.min_offset == 5
    assert cq.offset_for_timestamp(0, Boundary.LOWER, ts_of, 450) == 5
    assert cq.offset_for_timestamp(3, Boundary.LOWER, ts_of, 450) == 5
    assert cq.offset_for_timestamp(2, Boundary.UPPER, ts_of, 450) == 4
    assert cq.offset_for_timestamp(3, Boundary.UPPER, ts_of, 450) == 7
    # Units still present but below the CommitLog min are skipped.
    assert cq.offset_for_timestamp(0, Boundary.LOWER, ts_of, 650) == 7


@settings(max_examples=60, deadline=None)
@given(
    deltas=st.lists(st.integers(0, 3), min_size=0, max_size=150),
    target=st.integers(-2, 400),
    skip=st.integers(0, 40),
)
def test_timestamp_search_matches_reference(
    tmp_path_factory: pytest.TempPathFactory, deltas: list[int], target: int, skip: int
) -> None:
    ts = np.cumsum(deltas, dtype=I64).tolist()
    cq, ts_of = queue_with_timestamps(tmp_path_factory.mktemp("ts"), ts, units_per_file=16)
    first = min(skip, len(ts))
    bound = skip * STEP
    got_lower = cq.offset_for_timestamp(target, Boundary.LOWER, ts_of, bound)
    got_upper = cq.offset_for_timestamp(target, Boundary.UPPER, ts_of, bound)
    assert got_lower == reference_lower(ts, target, first)
    assert got_upper == reference_upper(ts, target, first)
    cq.close()


# Store and dispatch --------------------------------------------------------------------------
def random_batch(
    rng: np.random.Generator, n: int, next_offsets: dict[tuple[int, int], int], start_commitlog: int
) -> DispatchBatch:
    topics = ("orders", "events", "SCHEDULE_TOPIC_XXXX")
    topic_codes = rng.integers(0, len(topics), n).astype(I32)
    queue_ids = rng.integers(0, 3, n).astype(I32)
    sys_flags = rng.choice(np.array([0, 0, 0, 0x4, 0x8, 0xC, 0x1], dtype=I32), n)
    queue_offsets = np.empty(n, dtype=I64)
    for i in range(n):
        key = (int(topic_codes[i]), int(queue_ids[i]))
        tx = int(sys_flags[i]) & 0xC
        queue_offsets[i] = next_offsets.get(key, 0)
        if tx not in (0x4, 0xC):
            next_offsets[key] = int(queue_offsets[i]) + 1
    sizes = rng.integers(100, 200, n).astype(I32)
    offsets = start_commitlog + np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(I64)
    return DispatchBatch(
        commitlog_offsets=offsets,
        sizes=sizes,
        tags_codes=rng.integers(-(2**31), 2**31, n).astype(I64),
        queue_ids=queue_ids,
        queue_offsets=queue_offsets,
        store_timestamps_ms=np.arange(n, dtype=I64) + 1_000,
        sys_flags=sys_flags,
        topic_codes=topic_codes,
        topics=topics,
        uniq_keys=(None,) * n,
        keys=(None,) * n,
    )


COLUMNS = (
    "commitlog_offsets",
    "sizes",
    "tags_codes",
    "queue_ids",
    "queue_offsets",
    "store_timestamps_ms",
    "sys_flags",
    "topic_codes",
)


def row_of(batch: DispatchBatch, i: int) -> DispatchBatch:
    columns: dict[str, Any] = {name: getattr(batch, name)[i : i + 1] for name in COLUMNS}
    return DispatchBatch(
        **columns, topics=batch.topics, uniq_keys=batch.uniq_keys[i : i + 1], keys=batch.keys[i : i + 1]
    )


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_vectorised_dispatch_equals_scalar_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    next_offsets: dict[tuple[int, int], int] = {}
    batches = []
    end = 0
    for n in (1, 50, 300, 7):
        batches.append(random_batch(rng, n, next_offsets, end))
        end = batches[-1].end_offset
    fast = ConsumeQueueStore(tmp_path / "fast", units_per_file=16)
    slow = ConsumeQueueStore(tmp_path / "slow", units_per_file=16)
    one_by_one = ConsumeQueueStore(tmp_path / "one", units_per_file=16)
    for batch in batches:
        fast.dispatch(batch)
        fast.dispatch(batch)  # replay is a no-op
        for i in range(len(batch)):
            if int(batch.sys_flags[i]) & 0xC in (0x4, 0xC):
                continue
            queue = slow.get_or_create(batch.topics[int(batch.topic_codes[i])], int(batch.queue_ids[i]))
            queue.put_unit(
                int(batch.queue_offsets[i]),
                int(batch.commitlog_offsets[i]),
                int(batch.sizes[i]),
                int(batch.tags_codes[i]),
            )
            one_by_one.dispatch(row_of(batch, i))
    assert tree_bytes(tmp_path / "fast") == tree_bytes(tmp_path / "slow")
    assert tree_bytes(tmp_path / "fast") == tree_bytes(tmp_path / "one")
    assert len(tree_bytes(tmp_path / "fast")) > 9
    kept = [(b, i) for b in batches for i in range(len(b)) if int(b.sys_flags[i]) & 0xC not in (0x4, 0xC)]
    assert fast.flush() == max(int(b.store_timestamps_ms[i]) for b, i in kept)
    fast.close()
    reopened = ConsumeQueueStore(tmp_path / "fast", units_per_file=16)
    assert {k: q.max_offset for k, q in reopened.queues().items()} == {
        (("orders", "events", "SCHEDULE_TOPIC_XXXX")[t], q): o for (t, q), o in next_offsets.items()
    }
    last_kept = max(int(b.commitlog_offsets[i]) + int(b.sizes[i]) for b, i in kept)
    assert reopened.max_commitlog_end() == last_kept


def test_store_skips_transaction_prepared_and_rollback(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path / "cq", units_per_file=8)
    batch = DispatchBatch(
        commitlog_offsets=np.array([0, 100, 200, 300], dtype=I64),
        sizes=np.full(4, 100, dtype=I32),
        tags_codes=np.zeros(4, dtype=I64),
        queue_ids=np.zeros(4, dtype=I32),
        queue_offsets=np.array([0, 1, 1, 1], dtype=I64),
        store_timestamps_ms=np.array([1, 2, 3, 4], dtype=I64),
        sys_flags=np.array([0, 0x4, 0x8, 0xC], dtype=I32),
        topic_codes=np.zeros(4, dtype=I32),
        topics=("t",),
        uniq_keys=(None,) * 4,
        keys=(None,) * 4,
    )
    assert store.dispatch(batch) == 2
    assert store.dispatch(DispatchBatch.empty()) == 0
    queue = store.get("t", 0)
    assert queue is not None
    assert queue.read_units(0, 10)["offset"].tolist() == [0, 200]
    assert store.flush() == 3


def test_store_delete_topic_and_read_only_discovery(tmp_path: Path) -> None:
    root = tmp_path / "cq"
    store = ConsumeQueueStore(root, units_per_file=8)
    reader = ConsumeQueueStore(root, units_per_file=8, read_only=True)
    put_range(store.get_or_create("a", 0), 0, 3)
    put_range(store.get_or_create("a", 1), 0, 2)
    put_range(store.get_or_create("b", 0), 0, 1)
    assert reader.get("a", 0) is None
    reader.refresh()
    assert {k: q.max_offset for k, q in reader.queues().items()} == {("a", 0): 3, ("a", 1): 2, ("b", 0): 1}
    put_range(store.get_or_create("a", 0), 3, 1)
    reader.refresh()
    queue = reader.get("a", 0)
    assert queue is not None
    assert queue.max_offset == 4
    assert store.delete_topic("a") == 2
    assert sorted(p.name for p in root.iterdir()) == ["b"]
    assert list(store.queues()) == [("b", 0)]
    store.destroy()
    assert list(root.iterdir()) == []


def test_read_only_follower_notices_a_writer_truncation(tmp_path: Path) -> None:
    writer = ConsumeQueue(tmp_path / "q", units_per_file=4)
    put_range(writer, 0, 10)
    reader = ConsumeQueue(tmp_path / "q", units_per_file=4, read_only=True)
    assert reader.max_offset == 10
    writer.truncate_dirty(3 * STEP)
    assert reader.refresh() == 3
    put_range(writer, 3, 2)
    assert reader.refresh() == 5


def test_store_level_recovery_and_retention(tmp_path: Path) -> None:
    store = ConsumeQueueStore(tmp_path / "cq", units_per_file=4)
    put_range(store.get_or_create("a", 0), 0, 10)
    put_range(store.get_or_create("b", 0), 0, 3)
    store.recover()
    store.truncate_dirty(8 * STEP)
    assert store.max_commitlog_end() == 8 * STEP
    assert store.delete_files_below(5 * STEP) == 1
    store.correct_min_offsets(6 * STEP)
    queue_a, queue_b = store.get("a", 0), store.get("b", 0)
    assert queue_a is not None
    assert queue_b is not None
    assert (queue_a.min_offset, queue_a.max_offset) == (6, 8)
    assert (queue_b.min_offset, queue_b.max_offset) == (3, 3)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(1, 9)),
        st.tuples(st.just("replay"), st.integers(1, 5)),
        st.tuples(st.just("truncate"), st.integers(0, 40)),
        st.tuples(st.just("retain"), st.integers(0, 40)),
        st.tuples(st.just("reopen"), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_queue_matches_a_model_across_crashes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    directory = tmp_path_factory.mktemp("model") / "q"
    cq = ConsumeQueue(directory, units_per_file=3)
    lo = hi = commitlog_min = 0
    for op, arg in ops:
        if op == "put":
            put_range(cq, hi, arg)
            hi += arg
        elif op == "replay":  # the dispatcher re-sends units it already wrote, plus one new
            start = max(lo, hi - arg)
            put_range(cq, start, hi - start + 1)
            hi += 1
        elif op == "truncate":  # CommitLog valid end cut mid-record: units from `arg` on are dirty
            cq.truncate_dirty(arg * STEP + STEP // 2)
            hi = min(hi, max(lo, arg))
        elif op == "retain":  # the CommitLog min never passes the written end
            commitlog_min = max(commitlog_min, min(arg, hi) * STEP)
            cq.delete_files_below(commitlog_min)
            lo = max(lo, commitlog_min // STEP)
        else:  # crash and reopen: recover, then correct the min like the store does
            cq.close()
            cq = ConsumeQueue(directory, units_per_file=3)
            cq.recover()
            cq.correct_min_offset(commitlog_min)
        assert (cq.min_offset, cq.max_offset) == (lo, hi), ops
        assert cq.read_units(lo, 1_000)["offset"].tolist() == [i * STEP for i in range(lo, hi)]
    cq.close()


def test_concurrent_writer_and_followers_see_only_whole_units(tmp_path: Path) -> None:
    total = 3_000
    writer = ConsumeQueue(tmp_path / "q", units_per_file=64)
    follower = ConsumeQueue(tmp_path / "q", units_per_file=64, read_only=True)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            rng = np.random.default_rng(5)
            done = 0
            while done < total:
                count = min(total - done, int(rng.integers(1, 90)))
                if count == 1:
                    writer.put_unit(done, done * STEP, STEP, done * 7)
                else:
                    put_range(writer, done, count)
                done += count
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    seen = 0
    deadline = time.monotonic() + 30
    while seen < total and time.monotonic() < deadline:
        for queue in (writer, follower):
            queue.refresh()
            units = queue.read_units(0, total)
            assert units["offset"].tolist() == [i * STEP for i in range(len(units))]
            assert (units["size"] == STEP).all()
            assert units["tags_code"].tolist() == [i * 7 for i in range(len(units))]
        seen = len(follower.read_units(0, total))
    thread.join()
    assert errors == []
    assert seen == total
