"""A full disk, in process: a write is refused cleanly (``StoreNotWritable``, nothing
half-written: no torn record, no ConsumeQueue unit past the CommitLog's end), reads keep
working, writes resume when space returns, and a store reopened on the full disk recovers
without touching an unallocated page of a mapped file (that would be a SIGBUS: this test
process would die).

Two full disks: ``FaultyFileSystem``'s ``allocate`` fault (any machine), and a real tmpfs of a
few MiB (root only: those tests mount one and skip otherwise). A broker process on a full
disk, over HTTP and Kafka, with ``kill -9``, is ``tests/ingest/test_full_disk_broker.py``.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Message, MessageStore, StoreConfig, StoreNotWritable
from store.io.fs import RESERVE_STEP_BYTES, FaultyFileSystem, OsFileSystem
from store.io.lock import write_abort_file
from tests.support.disks import fill_disk, fill_file, small_disk
from tests.support.stores import tiny_config
from tests.support.waiting import wait_until

BODY = 1000


def _bodies(store: MessageStore, topic: str, queues: int) -> Counter[bytes]:
    """Every message body readable from the topic's queues, counted."""
    seen: Counter[bytes] = Counter()
    for queue_id in range(queues):
        offset = store.min_offset(topic, queue_id)
        while True:
            got = store.get_messages(topic, queue_id, offset, 256)
            if not got.messages:
                break
            seen.update(m.body for m in got.messages)
            offset = got.next_offset
    return seen


def _batch(first: int, count: int, queue_id: int | None = None) -> list[Message]:
    return [
        Message(topic="t", body=f"m{first + i:08d}".encode().ljust(BODY, b"x"), queue_id=queue_id)
        for i in range(count)
    ]


# --- the seam: reserve, backed_end, reads past the allocation ----------------------------------


def test_a_new_file_is_sparse_and_reserve_allocates_a_step_ahead(tmp_path: Path) -> None:
    handle = OsFileSystem().create(tmp_path / "f", 4 * RESERVE_STEP_BYTES)
    try:
        assert handle.backed_end == 0
        assert (tmp_path / "f").stat().st_blocks == 0
        assert handle.read(RESERVE_STEP_BYTES, 8) == bytes(8)  # pread: a hole is zeros, unallocated
        assert (tmp_path / "f").stat().st_blocks == 0
        handle.reserve(100)
        assert handle.backed_end == RESERVE_STEP_BYTES
        assert (tmp_path / "f").stat().st_blocks * 512 >= RESERVE_STEP_BYTES
        handle.write(10, b"abc")
        assert handle.read(9, 5) == b"\x00abc\x00"
        handle.reserve(10 * RESERVE_STEP_BYTES)  # capped at the size
        assert handle.backed_end == 4 * RESERVE_STEP_BYTES
    finally:
        handle.close()
    reopened = OsFileSystem().open(tmp_path / "f")
    try:
        assert reopened.read(9, 5) == b"\x00abc\x00"
        assert 0 < reopened.backed_end <= 4 * RESERVE_STEP_BYTES  # allocated but unwritten: maybe a hole
    finally:
        reopened.close()


def test_the_allocate_fault_fires_only_when_something_must_be_allocated(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    handle = fs.create(tmp_path / "f", 2 * RESERVE_STEP_BYTES)
    try:
        fs.fail_nth("allocate", 1, persistent=True)
        with pytest.raises(OSError) as refused:
            handle.reserve(1)
        assert refused.value.errno == errno.ENOSPC and handle.backed_end == 0
        fs.heal()
        handle.reserve(1)
        fs.fail_nth("allocate", 1, persistent=True)
        handle.reserve(RESERVE_STEP_BYTES)  # already allocated: nothing to ask the disk
        assert fs.calls("allocate") == 1
    finally:
        handle.close()


# --- FaultyFileSystem: a disk too full for a ConsumeQueue or index page ----------------------------


@pytest.fixture
def faulty() -> FaultyFileSystem:
    return FaultyFileSystem()


@pytest.fixture
def store(tmp_path: Path, faulty: FaultyFileSystem) -> Iterator[MessageStore]:
    config = tiny_config(tmp_path / "s", background_services=True, index_lookup_wait_ms=300)
    with MessageStore.open(config, fs=faulty) as opened:
        opened.create_topic("t", 2)
        yield opened


def test_a_consume_queue_that_cannot_grow_refuses_the_whole_put(
    store: MessageStore, faulty: FaultyFileSystem
) -> None:
    """Queue 0 takes its units, queue 1 cannot allocate its first page: the put is refused,
    the CommitLog is back where it was and queue 0 holds no unit pointing past it."""
    store.put_messages(_batch(0, 3, queue_id=0))
    end = store.commitlog_max_offset
    faulty.fail_nth("allocate", 1, persistent=True, only="/consumequeue/t/1/")
    with pytest.raises(StoreNotWritable, match="No space left"):
        store.put_messages(_batch(3, 2, queue_id=0) + _batch(5, 2, queue_id=1))
    assert store.commitlog_max_offset == end
    assert (store.max_offset("t", 0), store.max_offset("t", 1)) == (3, 0)
    assert _bodies(store, "t", 2) == Counter(m.body for m in _batch(0, 3))
    faulty.heal()  # space returns: the next put goes through, nothing was lost or doubled
    store.put_messages(_batch(3, 2, queue_id=0) + _batch(5, 2, queue_id=1))
    assert _bodies(store, "t", 2) == Counter(m.body for m in _batch(0, 7))


def test_an_index_that_cannot_grow_falls_behind_and_catches_up(
    store: MessageStore, faulty: FaultyFileSystem
) -> None:
    faulty.fail_nth("allocate", 1, persistent=True, only="/index/")
    store.put_messages([Message(topic="t", body=b"keyed", keys=("k1",))])  # the put itself is fine
    wait_until(lambda: not store.health().ok, 5, "the index failure to show")
    assert not store.wait_indexed(0.1)
    faulty.heal()
    wait_until(lambda: store.health().ok, 15, "the index to catch up")
    assert [m.body for m in store.query_by_key("t", "k1")] == [b"keyed"]


# --- a real full disk (tmpfs, root) --------------------------------------------------------------


def _disk_config(store_dir: Path) -> StoreConfig:
    """CommitLog files larger than the whole disk (they are sparse), ConsumeQueue files of
    ~6 MiB allocated a MiB at a time, an index with a small slot table."""
    return StoreConfig(
        store_dir=store_dir,
        commitlog_file_size_bytes=64 << 20,
        index_hash_slots=10_000,
        index_max_entries=100_000,
        default_queues_per_topic=4,
        background_services=True,
        index_lookup_wait_ms=300,
    )


def _fill_until_refused(store: MessageStore, first: int, limit: int = 100_000) -> int:
    """Put batches of 50, then single messages, until refused; returns the next id."""
    next_id = first
    refusals: list[str] = []
    for size in (50, 1):
        while next_id < limit:
            try:
                store.put_messages(_batch(next_id, size))
            except StoreNotWritable as exc:
                refusals.append(str(exc))
                break
            next_id += size
    assert len(refusals) == 2 and all("No space left" in r for r in refusals), refusals
    with pytest.raises(StoreNotWritable, match="No space left"):
        store.put_messages(_batch(next_id, 1))
    return next_id


def _close(store: MessageStore) -> None:
    """Close on a full disk: clean, or refused with everything released and ``abort`` kept."""
    try:
        store.close()
    except StoreNotWritable as exc:
        assert "the next open recovers as after a crash" in str(exc)  # noqa: PT017 (either outcome)
        assert store.config.abort_path.exists()


def test_a_store_on_a_full_tmpfs_refuses_recovers_and_resumes(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", 24) as disk:
        fill_file(disk / "filler", 4 << 20)  # space to give back at the end
        config = _disk_config(disk / "store")
        store = MessageStore.open(config)
        store.create_topic("t", 4)
        acked = _fill_until_refused(store, 0)
        assert acked > 1000
        assert _bodies(store, "t", 4) == Counter(m.body for m in _batch(0, acked))
        _close(store)
        fill_disk(disk)  # whatever is left is taken too
        for crashed in (False, True):  # as left, then as after kill -9 (abort file)
            if crashed:
                write_abort_file(config.abort_path)
            store = MessageStore.open(config)
            assert _bodies(store, "t", 4) == Counter(m.body for m in _batch(0, acked))
            more = _fill_until_refused(store, acked)
            assert _bodies(store, "t", 4) == Counter(m.body for m in _batch(0, more))
            acked = more
            _close(store)
        with MessageStore.open(config) as store:
            (disk / "filler").unlink()  # space returns: writes resume on the next put
            store.put_messages(_batch(acked, 100))
            assert store.wait_indexed(10)
            seen = _bodies(store, "t", 4)
            assert seen == Counter(m.body for m in _batch(0, acked + 100))
            assert max(seen.values()) == 1
