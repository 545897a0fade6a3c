"""``MessageStore.append_replicated`` and the confirm offset, without sockets: raw CommitLog bytes of
a source store appended to a replicated store exactly at its end, dispatched through the normal
dispatch (identical queue offsets and ConsumeQueue files), records cut by a frame end dispatched
when completed, gaps, overlaps and damage refused; readers (in-process and ``StoreReader``) and
arrival notices bounded by the confirm offset."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from store import GetStatus, Message, MessageStore, StoreReader
from store.errors import NotMaster, ReplicatedDataCorrupt, ReplicationGap
from store.metadata.checkpoint import decode_checkpoint
from tests.support.stores import ManualClock, tiny_config


@pytest.fixture
def source(tmp_path: Path) -> MessageStore:
    """A lone store holding ~300 KiB of records over several 64 KiB files."""
    store = MessageStore.open(tiny_config(tmp_path / "source"), clock_ms=ManualClock())
    for i in range(240):
        store.put_message(
            Message(
                topic="orders", body=bytes([i % 251]) * (200 + 37 * (i % 40)), queue_id=i % 3, keys=(f"k{i}",)
            )
        )
    store.put_batch("audit", [b"a" * 90] * 50, queue_ids=1, tags="t")
    yield store
    store.close()


@pytest.fixture
def replica(tmp_path: Path) -> MessageStore:
    store = MessageStore.open(tiny_config(tmp_path / "replica", replicated=True), clock_ms=ManualClock())
    yield store
    store.close()


def chunks(store: MessageStore, size: int) -> list[tuple[int, bytes]]:
    """The source's CommitLog as (offset, bytes) frames of at most ``size`` bytes (never across a file)."""
    log = store.replica_log()
    out, offset = [], log.min_offset
    while offset < log.max_offset:
        with log.transfer_view(offset, size) as view:
            data = bytes(view)
        assert data
        out.append((offset, data))
        offset += len(data)
    return out


def copy(source: MessageStore, replica: MessageStore, frame_bytes: int) -> None:
    for offset, data in chunks(source, frame_bytes):
        replica.append_replicated(offset, data)


def partial_mark(checkpoint: Path) -> int | None:
    """The checkpoint's partial-record mark as on disk now."""
    return decode_checkpoint(checkpoint.read_bytes()).partial_record_offset


def files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("frame_bytes", [1000, 4093, 70_000])
def test_replicated_bytes_build_identical_files(
    source: MessageStore, replica: MessageStore, frame_bytes: int
) -> None:
    copy(source, replica, frame_bytes)  # frames cut records anywhere; file ends with their BLANK come whole
    assert replica.commitlog_max_offset == source.commitlog_max_offset
    src_dir, rep_dir = source.config.store_dir, replica.config.store_dir
    assert len(list((src_dir / "commitlog").iterdir())) >= 4
    assert files(rep_dir / "commitlog") == files(src_dir / "commitlog")
    assert files(rep_dir / "consumequeue") == files(src_dir / "consumequeue")
    replica.replica_log().advance_confirm(replica.commitlog_max_offset)
    for topic in ("orders", "audit"):
        for queue_id, (lo, hi) in source.queue_offsets(topic).items():
            if hi == 0:
                continue
            assert replica.max_offset(topic, queue_id) == hi
            mine = replica.read_batch(topic, queue_id, lo, 1000).batch
            theirs = source.read_batch(topic, queue_id, lo, 1000).batch
            assert mine.equals(theirs)
    hit = replica.query_by_key("orders", "k77")
    assert [m.body for m in hit] == [bytes([77]) * (200 + 37 * 37)]


def test_a_record_cut_by_a_frame_is_dispatched_when_it_completes(
    source: MessageStore, replica: MessageStore
) -> None:
    first_size = len(source.read_record(0) or b"")
    data = source.replica_log().transfer_view(0, first_size + 50).tobytes()
    replica.append_replicated(0, data[:100])
    log = replica.replica_log()
    assert (log.max_offset, log.dispatched_to) == (100, 0)
    assert replica.replica_log().queue_max_offsets() == {}
    log.append_raw(100, data[100:])  # a slave acks here, before dispatching
    assert (log.max_offset, log.dispatched_to) == (len(data), 0)
    assert replica.replica_log().queue_max_offsets() == {}
    assert log.dispatch_appended() == first_size  # the first record is whole now, the second is not
    assert replica.replica_log().queue_max_offsets() == {("orders", 0): 1}


@pytest.mark.parametrize("stop", ["abandon", "close"])
def test_a_replica_stopped_inside_a_record_cuts_it_when_it_opens(
    source: MessageStore, tmp_path: Path, stop: str
) -> None:
    """Seen in a kill test: frames ended inside a record's properties and the slave was
    killed; recovery took the record for whole (the body CRC holds, the tail is zeros) and the
    replica kept it for ever, different from its master's. The checkpoint's partial-record mark
    makes the next open cut it, after a kill or a clean close."""
    config = tiny_config(tmp_path / "stopped", replicated=True)
    replica = MessageStore.open(config, clock_ms=ManualClock())
    frames = chunks(source, 4000)
    start = 0  # the first record to start inside the third frame (the first file holds them)
    while start <= frames[2][0]:
        start += len(source.read_record(start) or b"")
    size = len(source.read_record(start) or b"")
    cut = start + size - 10  # inside its properties
    for offset, data in frames[:2]:
        replica.append_replicated(offset, data)
    log = replica.replica_log()
    log.append_raw(frames[2][0], frames[2][1][: cut - frames[2][0]])  # the slave acks, then dies
    assert partial_mark(config.checkpoint_path) == start
    replica.abandon() if stop == "abandon" else replica.close()
    replica = MessageStore.open(config, clock_ms=ManualClock())
    assert replica.commitlog_max_offset == start, "the record received in part is gone"
    assert replica.replica_log().dispatched_to == start
    rest = source.replica_log().transfer_view(start, 10_000).tobytes()
    replica.append_replicated(start, rest[: size + 5])
    assert partial_mark(config.checkpoint_path) == start + size
    replica.append_replicated(start + size + 5, rest[size + 5 :])
    for offset, data in chunks(source, 4000):
        if offset >= replica.commitlog_max_offset:
            replica.append_replicated(offset, data)
        elif offset + len(data) > replica.commitlog_max_offset:
            replica.append_replicated(
                replica.commitlog_max_offset, data[replica.commitlog_max_offset - offset :]
            )
    replica.abandon()  # a crash after whole records: nothing is cut
    replica = MessageStore.open(config, clock_ms=ManualClock())
    assert files(config.store_dir / "commitlog") == files(source.config.store_dir / "commitlog")
    assert replica.commitlog_max_offset == source.commitlog_max_offset
    replica.close()


def test_gaps_overlaps_and_file_crossings_are_refused(source: MessageStore, replica: MessageStore) -> None:
    frames = chunks(source, 5000)
    replica.append_replicated(*frames[0])
    end = replica.commitlog_max_offset
    with pytest.raises(ReplicationGap, match="start at"):
        replica.append_replicated(frames[2][0], frames[2][1])  # a gap
    with pytest.raises(ReplicationGap, match="start at"):
        replica.append_replicated(frames[0][0] + 10, frames[0][1][10:])  # an overlap
    size = replica.config.commitlog_file_size_bytes
    with pytest.raises(ReplicationGap, match="cross the end"):
        replica.append_replicated(end, bytes(size))
    assert replica.commitlog_max_offset == end


def test_damaged_bytes_are_removed_and_nothing_of_them_dispatched(
    source: MessageStore, replica: MessageStore
) -> None:
    sizes = [len(source.read_record(0) or b"")]
    sizes.append(len(source.read_record(sizes[0]) or b""))
    data = bytearray(source.replica_log().transfer_view(0, sum(sizes)).tobytes())
    data[sizes[0] + 100] ^= 0xFF  # a flipped bit in the second record's body: its CRC fails
    with pytest.raises(ReplicatedDataCorrupt):
        replica.append_replicated(0, bytes(data))
    assert replica.commitlog_max_offset == sizes[0]  # the first record was fine and stays
    assert replica.replica_log().queue_max_offsets() == {("orders", 0): 1}


def test_a_new_replica_starts_at_its_masters_first_file(source: MessageStore, replica: MessageStore) -> None:
    size = source.config.commitlog_file_size_bytes
    later = [(o, d) for o, d in chunks(source, 8000) if o >= size]
    assert later[0][0] == size
    for offset, data in later:
        replica.append_replicated(offset, data)
    log = replica.replica_log()
    assert (log.min_offset, log.max_offset) == (size, source.commitlog_max_offset)
    assert files(replica.config.store_dir / "commitlog") == {
        name: body for name, body in files(source.config.store_dir / "commitlog").items() if name != "0" * 20
    }


def test_a_replicated_store_refuses_producers_until_it_has_a_role(replica: MessageStore) -> None:
    with pytest.raises(NotMaster) as refused:
        replica.put_message(Message(topic="orders", body=b"x"))
    assert refused.value.status == "SERVICE_NOT_AVAILABLE"
    assert replica.commitlog_max_offset == 0
    assert not replica.has_topic("orders")


def test_readers_and_arrivals_stop_at_the_confirm_offset(source: MessageStore, replica: MessageStore) -> None:
    copy(source, replica, 9000)
    log = replica.replica_log()
    units = _units(source, "orders", 0)
    heard: list[tuple[str, int, int]] = []
    replica.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    assert replica.confirm_offset == 0
    assert replica.max_offset("orders", 0) == 0
    assert replica.get_messages("orders", 0, 0).status is GetStatus.NO_NEW_MESSAGE
    assert replica.read_batch("orders", 0, 0, 100).num_messages == 0
    with StoreReader(replica.config.store_dir) as follower:
        assert follower.queue_offsets("orders")[0] == (0, 0)
        assert heard == []  # the dispatched records' notices wait for the confirm offset
        tenth_end = units[9][0] + units[9][1]
        log.advance_confirm(tenth_end)  # the 10th record of queue 0 ends exactly here
        assert replica.max_offset("orders", 0) == 10
        assert follower.queue_offsets("orders")[0] == (0, 10)
        assert follower.read_batch("orders", 0, 0, 100).num_messages == 10
        assert replica.read_batch("orders", 0, 5, 100).next_offset == 10
        assert replica.get_messages("orders", 0, 0, 100).next_offset == 10
        log.advance_confirm(tenth_end + 1)  # inside the next record: still 10
        assert replica.max_offset("orders", 0) == 10
        log.advance_confirm(10**12)  # clamped to the log's valid end
        assert replica.confirm_offset == replica.commitlog_max_offset
        assert follower.queue_offsets("orders") == replica.queue_offsets("orders")
    assert heard  # released as the confirm offset covered them
    assert all(m <= replica.max_offset(t, q) for t, q, m in heard)


def test_long_polls_wake_when_the_confirm_offset_covers_a_record(
    source: MessageStore, replica: MessageStore
) -> None:
    frames = chunks(source, 100_000)
    replica.append_replicated(*frames[0])
    heard: list[tuple[str, int, int]] = []
    replica.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
    woke = threading.Event()

    def poll() -> None:
        if replica.wait_for_message("orders", 1, 0, timeout_s=10):
            woke.set()

    poller = threading.Thread(target=poll)
    poller.start()
    replica.append_replicated(*frames[1])  # dispatched, but not confirmed
    assert not woke.wait(0.3)
    assert heard == []
    replica.replica_log().advance_confirm(replica.commitlog_max_offset)
    poller.join(10)
    assert woke.is_set()
    assert ("orders", 1, replica.max_offset("orders", 1)) in heard


def _units(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, int]]:
    """(CommitLog offset, size) of every record of one queue, in queue order."""
    got = store.get_messages(topic, queue_id, store.min_offset(topic, queue_id), 10_000)
    return [(m.commitlog_offset, m.size_bytes) for m in got.messages]
