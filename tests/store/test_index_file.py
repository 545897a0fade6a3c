"""The IndexFile: golden header, slot and entry bytes, a golden file image, the vectorised insert
against a one-by-one reference, RocketMQ's keys."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.commitlog.dispatch_batch import DispatchBatch
from store.errors import StoreError
from store.format.arrow_ranges import ArrowStrings
from store.format.java_hash import index_key_hash
from store.index.index_file import (
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    INDEX_SLOT,
    IndexFile,
    IndexHeader,
    chain_links,
    decode_entry,
    encode_entry,
    index_file_size,
)
from store.index.index_service import (
    IndexService,
    file_name_for,
    index_key_entries_arrow,
    index_key_entries_listed,
    index_key_entries_scalar,
    timestamp_of_file_name,
)

I32 = np.int32
I64 = np.int64
T0 = 1_700_000_000_000  # 0x0000018BCFE56800


def h(*values: int) -> npt.NDArray[np.int32]:
    return np.array(values, dtype=I32)


def o(*values: int) -> npt.NDArray[np.int64]:
    return np.array(values, dtype=I64)


# Golden vectors (expected hex written by hand from the layout) -------------------------------
def test_golden_header() -> None:
    header = IndexHeader(
        begin_timestamp_ms=0x0102030405060708,
        end_timestamp_ms=0x1112131415161718,
        begin_phy_offset=0x2122232425262728,
        end_phy_offset=0x3132333435363738,
        hash_slot_count=0x41424344,
        index_count=0x51525354,
    )
    expected = bytes.fromhex(
        "0102030405060708 1112131415161718 2122232425262728 3132333435363738 41424344 51525354"
    )
    assert header.encode() == expected
    assert IndexHeader.decode(expected) == header
    assert INDEX_HEADER_SIZE == 40


def test_golden_entry_and_slot() -> None:
    expected = bytes.fromhex("11223344 0a0b0c0d0e0f1011 00000e10 00000007")
    assert encode_entry(0x11223344, 0x0A0B0C0D0E0F1011, 3600, 7) == expected
    assert decode_entry(expected) == (0x11223344, 0x0A0B0C0D0E0F1011, 3600, 7)
    assert INDEX_SLOT.pack(5) == bytes.fromhex("00000005")
    assert INDEX_ENTRY_SIZE == 20


def test_golden_file_image(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "20231114221320000", slot_count=4, max_entries=4)
    assert f.put_batch(h(10), o(0x100), o(T0)) == 1  # slot 10 % 4 = 2
    assert f.put_batch(h(14), o(0x200), o(T0 + 5_500)) == 1  # slot 2 again: chains to entry 1
    f.flush()
    image = (tmp_path / "20231114221320000").read_bytes()
    expected = bytes.fromhex(
        # header: begin ts, end ts, begin phy, end phy, slots used 1, indexCount 3
        "0000018bcfe56800 0000018bcfe57d7c 0000000000000100 0000000000000200 00000001 00000003"
        # slots 0..3: slot 2 -> entry 2
        "00000000 00000000 00000002 00000000"
        # entry 0 unused
        "00000000 0000000000000000 00000000 00000000"
        # entry 1: hash 10, phy 0x100, 0 s, prev 0
        "0000000a 0000000000000100 00000000 00000000"
        # entry 2: hash 14, phy 0x200, 5 s, prev 1
        "0000000e 0000000000000200 00000005 00000001"
        # entry 3 empty
        "00000000 0000000000000000 00000000 00000000"
    )
    assert image == expected
    assert len(image) == index_file_size(4, 4)
    f.close()


# Codecs and the chain builder ----------------------------------------------------------------
@given(
    st.tuples(
        *(st.integers(-(2**63), 2**63 - 1) for _ in range(4)),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**31), 2**31 - 1),
    )
)
def test_header_round_trip(fields: tuple[int, int, int, int, int, int]) -> None:
    header = IndexHeader(*fields)
    assert IndexHeader.decode(header.encode()) == header


@given(
    st.integers(0, 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
)
def test_entry_round_trip(key_hash: int, phy: int, diff: int, prev: int) -> None:
    assert decode_entry(encode_entry(key_hash, phy, diff, prev)) == (key_hash, phy, diff, prev)


@given(st.lists(st.integers(0, 5), max_size=60), st.lists(st.integers(0, 9), min_size=6, max_size=6))
def test_chain_links_matches_scalar_reference(slots: list[int], heads: list[int]) -> None:
    first_index = 10
    expected_prev = []
    table = list(heads)
    for i, slot in enumerate(slots):
        expected_prev.append(table[slot])
        table[slot] = first_index + i
    slot_arr = np.array(slots, dtype=I64)
    prev, distinct, new_heads = chain_links(
        slot_arr, np.arange(first_index, first_index + len(slots), dtype=I64), np.array(heads, I64)[slot_arr]
    )
    assert prev.tolist() == expected_prev
    assert dict(zip(distinct.tolist(), new_heads.tolist(), strict=True)) == {s: table[s] for s in set(slots)}


def test_vectorised_insert_equals_one_by_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 200
    hashes = rng.integers(0, 2**31 - 1, n).astype(I32)
    hashes[::7] = hashes[0]  # same key many times
    phys = np.arange(n, dtype=I64) * 150
    stamps = T0 + np.sort(rng.integers(0, 600_000, n)).astype(I64)
    fast = IndexFile(tmp_path / "fast", slot_count=13, max_entries=n + 1)
    slow = IndexFile(tmp_path / "slow", slot_count=13, max_entries=n + 1)
    assert fast.put_batch(hashes[:50], phys[:50], stamps[:50]) == 50
    assert fast.put_batch(hashes[50:], phys[50:], stamps[50:]) == n - 50
    for i in range(n):
        slow.put_batch(hashes[i : i + 1], phys[i : i + 1], stamps[i : i + 1])
    fast.flush()
    slow.flush()
    assert (tmp_path / "fast").read_bytes() == (tmp_path / "slow").read_bytes()
    assert fast.put_batch(hashes, phys, stamps) == 0  # full
    assert fast.is_full


# Service -------------------------------------------------------------------------------------
class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def service(tmp_path: Path) -> Iterator[IndexService]:
    svc = IndexService(tmp_path / "index", slot_count=3, max_entries=5, clock_ms=FixedClock(T0))
    yield svc
    svc.close()


def make_batch(
    rows: Sequence[tuple[str, int, int, str | None, str | None, int]], topics: tuple[str, ...] = ("t", "u")
) -> DispatchBatch:
    """rows: (topic, commitlog offset, store ts, uniq key, keys, sys flag)."""
    n = len(rows)
    return DispatchBatch(
        commitlog_offsets=np.array([r[1] for r in rows], dtype=I64),
        sizes=np.full(n, 100, dtype=I32),
        tags_codes=np.zeros(n, dtype=I64),
        queue_ids=np.zeros(n, dtype=I32),
        queue_offsets=np.arange(n, dtype=I64),
        store_timestamps_ms=np.array([r[2] for r in rows], dtype=I64),
        sys_flags=np.array([r[5] for r in rows], dtype=I32),
        topic_codes=np.array([topics.index(r[0]) for r in rows], dtype=I32),
        topics=topics,
        uniq_keys=tuple(r[3] for r in rows),
        keys=tuple(r[4] for r in rows),
    )


def test_dispatch_builds_rocketmq_keys(service: IndexService) -> None:
    batch = make_batch(
        [
            ("t", 0, T0, "U0", "a b", 0),
            ("u", 100, T0, "U1", "a", 0x4),  # prepared: indexed
            ("t", 200, T0, "U2", "a", 0xC),  # rollback: skipped
            ("t", 300, T0, None, "  b  ", 0x8),
        ]
    )
    assert service.dispatch(batch) == 6
    assert service.dispatch(batch) == 0  # replay skipped
    assert service.query("t", "U0") == [0]
    assert service.query("t", "a") == [0]
    assert service.query("t", "b") == [300, 0]
    assert service.query("u", "a") == [100]
    assert service.query("t", "U2") == []
    assert service.last_indexed_offset() == 300


def test_collisions_and_rolling_match_a_model(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    svc = IndexService(tmp_path / "index", slot_count=3, max_entries=5, clock_ms=clock)
    keys = [f"k{i % 11}" for i in range(60)]
    phys = np.arange(60, dtype=I64) * 10
    stamps = T0 + np.arange(60, dtype=I64) * 1_000
    for start in range(0, 60, 9):
        hashes = np.array([index_key_hash("t#" + k) for k in keys[start : start + 9]], dtype=I32)
        svc.put_hashes(hashes, phys[start : start + 9], stamps[start : start + 9])
    names = [f.path.name for f in svc.files]
    assert len(names) == 15  # 4 entries per file (entry 0 unused)
    assert names == sorted(names)
    assert [timestamp_of_file_name(n) - T0 for n in names] == list(range(15))  # same ms: bumped
    for key in set(keys):
        expected = [int(phys[i]) for i in reversed(range(60)) if keys[i] == key]
        assert svc.query("t", key, max_results=100) == expected
        assert svc.query("t", key, max_results=2) == expected[:2]
    assert svc.query("t", "absent") == []
    svc.flush()
    svc.close()
    reopened = IndexService(tmp_path / "index", slot_count=3, max_entries=5, clock_ms=clock)
    assert reopened.query("t", "k3", max_results=100) == [580, 470, 360, 250, 140, 30]
    second = reopened.files[1].header
    assert (second.begin_phy_offset, second.end_phy_offset, second.index_count) == (40, 70, 5)
    reopened.close()


KEY_TEXT = st.one_of(st.none(), st.just(""), st.text(alphabet="ab é漢😀-_", max_size=12))
KEYS_TEXT = st.one_of(KEY_TEXT, st.lists(KEY_TEXT.map(lambda k: k or ""), max_size=4).map(" ".join))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(("t", "u", "%RETRY%g")), KEY_TEXT, KEYS_TEXT), max_size=80),
    st.booleans(),
    st.data(),
)
def test_scalar_and_arrow_index_entries_agree(
    rows: list[tuple[str, str | None, str | None]], as_arrow: bool, data: st.DataObject
) -> None:
    """Tiny batches are indexed one key at a time, larger ones hashed together from Python
    strings or with Arrow kernels: all three give the same entries in the same order, for key
    columns given as Python or Arrow strings."""
    topics = ("%RETRY%g", "u", "t")
    uniq, keys = [r[1] for r in rows], [r[2] for r in rows]
    batch = DispatchBatch(
        commitlog_offsets=np.arange(len(rows), dtype=I64) * 100,
        sizes=np.full(len(rows), 100, dtype=I32),
        tags_codes=np.zeros(len(rows), dtype=I64),
        queue_ids=np.zeros(len(rows), dtype=I32),
        queue_offsets=np.arange(len(rows), dtype=I64),
        store_timestamps_ms=np.full(len(rows), T0, dtype=I64),
        sys_flags=np.zeros(len(rows), dtype=I32),
        topic_codes=np.array([topics.index(r[0]) for r in rows], dtype=I32),
        topics=topics,
        uniq_keys=ArrowStrings(pa.array(uniq, pa.string())) if as_arrow else uniq,
        keys=ArrowStrings(pa.array(keys, pa.string())) if as_arrow else keys,
    )
    picked = data.draw(st.lists(st.sampled_from(range(len(rows))), unique=True).map(sorted)) if rows else []
    selected = np.array(picked, dtype=I64)
    scalar, arrow = index_key_entries_scalar(batch, selected), index_key_entries_arrow(batch, selected)
    listed = index_key_entries_listed(batch, selected)
    assert scalar[0].tolist() == arrow[0].tolist() == listed[0].tolist()
    assert scalar[1].tolist() == arrow[1].tolist() == listed[1].tolist()
    expected = [
        (index_key_hash(f"{rows[i][0]}#{key}"), i)
        for i in picked
        for key in [uniq[i], *(keys[i] or "").split(" ")]
        if key
    ]
    assert list(zip(scalar[0].tolist(), scalar[1].tolist(), strict=True)) == expected


def test_time_range_and_stop_rules(service: IndexService) -> None:
    rows = [("t", i * 100, T0 + i * 10_000, None, "k", 0) for i in range(3)]
    service.dispatch(make_batch(rows))
    assert service.query("t", "k") == [200, 100, 0]
    assert service.query("t", "k", T0 + 10_000, T0 + 10_000) == [100]
    assert service.query("t", "k", T0 + 10_001, T0 + 19_999) == []
    assert service.query("t", "k", T0 + 5_000) == [200, 100]
    assert service.query("t", "k", 0, T0 - 1) == []
    assert service.query("t", "k", max_results=0) == []


def test_time_diff_has_second_resolution(service: IndexService) -> None:
    service.dispatch(make_batch([("t", 0, T0, None, "a", 0), ("t", 100, T0 + 1_999, None, "a", 0)]))
    # Stored as T0 + 1 s: found from T0+1000 on, not from T0+1500 (RocketMQ behaviour).
    assert service.query("t", "a", T0 + 1_000) == [100]
    assert service.query("t", "a", T0 + 1_500) == []


def test_retention_and_abnormal_recovery(service: IndexService) -> None:
    rows = [("t", i * 100, T0 + i * 1_000, None, "k", 0) for i in range(10)]
    service.dispatch(make_batch(rows))
    assert len(service.files) == 3
    assert service.delete_files_below(300) == 0  # file 0 ends at offset 300
    assert service.delete_files_below(301) == 1
    assert len(service.files) == 2
    assert service.query("t", "k", max_results=100) == [900, 800, 700, 600, 500, 400]
    assert service.delete_files_below(10_000) == 1  # never the last file
    assert len(service.files) == 1
    assert service.flush() == T0 + 9_000
    assert service.destroy_newer_than(T0 + 9_000) == 0
    assert service.destroy_newer_than(T0 + 8_999) == 1
    assert service.files == []
    assert service.last_indexed_offset() == -1
    assert service.dispatch(make_batch(rows[:2])) == 2


def test_a_file_torn_at_creation_is_started_empty(tmp_path: Path) -> None:
    """kill -9 while the index thread creates a file (sized, fsynced, header not yet written):
    the next writer must not adopt its all-zero header, or its first entry lands at #0, which a
    slot cannot point to, and that key is never found (a sink's resume then writes it twice)."""
    directory = tmp_path / "index"
    directory.mkdir()
    torn = directory / file_name_for(T0)
    torn.write_bytes(bytes(index_file_size(3, 5)))
    service = IndexService(directory, slot_count=3, max_entries=5, clock_ms=FixedClock(T0))
    assert service.last_indexed_offset() == -1
    service.dispatch(make_batch([("t", 0, T0, "U0", None, 0), ("t", 100, T0, "U1", None, 0)]))
    assert service.query("t", "U0") == [0]
    assert service.query("t", "U1") == [100]
    assert service.files[0].header.index_count == 3


def test_read_only_follower(tmp_path: Path) -> None:
    writer = IndexService(tmp_path / "index", slot_count=3, max_entries=5, clock_ms=FixedClock(T0))
    writer.dispatch(make_batch([("t", 0, T0, None, "k", 0)]))
    reader = IndexService(tmp_path / "index", slot_count=3, max_entries=5, read_only=True)
    assert reader.query("t", "k") == [0]
    writer.dispatch(make_batch([("t", i * 100, T0, None, "k", 0) for i in range(1, 8)]))
    assert reader.query("t", "k", max_results=100) == [300, 200, 100, 0]  # stale file list
    reader.refresh()
    assert reader.query("t", "k", max_results=100) == [i * 100 for i in reversed(range(8))]
    with pytest.raises(StoreError, match="read-only"):
        reader.dispatch(make_batch([("t", 900, T0, None, "k", 0)]))
    assert reader.flush() == 0
    reader.close()
    writer.destroy()
    assert list((tmp_path / "index").iterdir()) == []


def test_file_names() -> None:
    assert file_name_for(T0) == "20231114221320000"
    assert file_name_for(T0 + 1_234) == "20231114221321234"
    assert timestamp_of_file_name("20231114221321234") == T0 + 1_234


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 3_000)), max_size=40))
def test_query_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, puts: list[tuple[str, int]]
) -> None:
    svc = IndexService(tmp_path_factory.mktemp("ix"), slot_count=2, max_entries=7, clock_ms=FixedClock(T0))
    stamps = np.cumsum([p[1] for p in puts], dtype=I64) + T0
    rows = [("t", i * 10, int(stamps[i]), None, p[0], 0) for i, p in enumerate(puts)]
    if rows:
        svc.dispatch(make_batch(rows))
    for key in "abcd":
        expected = [r[1] for r in reversed(rows) if r[4] == key]
        assert svc.query("t", key, max_results=1_000) == expected
    svc.close()


def test_true_hash_collisions_are_returned_for_the_caller_to_filter(service: IndexService) -> None:
    assert index_key_hash("t#Aa") == index_key_hash("t#BB")  # Java: "Aa".hashCode() == "BB".hashCode()
    service.dispatch(make_batch([("t", 0, T0, None, "Aa", 0), ("t", 100, T0, None, "BB", 0)]))
    assert service.query("t", "Aa") == [100, 0]
    assert service.query("t", "BB") == [100, 0]
