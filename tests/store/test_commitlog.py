"""CommitLog: appends across tiny files, all-or-nothing on I/O faults, scans, recovery."""

from __future__ import annotations

import errno
import logging
import os
import random
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.commitlog import commitlog as commitlog_module
from store.commitlog.commitlog import CommitLog
from store.errors import DataLost, MessageTooLarge, StoreNotWritable
from store.format import ids, record_check
from store.format import record as codec
from store.format.batch_encode import EncodedBatch
from store.format.java_hash import java_string_hash
from store.format.record import RecordFields, encode_record
from store.io.fs import FaultyFileSystem, FileSystem

FILE_SIZE = 4096
STORE_HOST = ("10.0.0.2", 10911)


def record(i: int, body_len: int = 200, topic: str = "orders", store_ts: int | None = None) -> bytes:
    return encode_record(
        RecordFields(
            topic=topic,
            body=bytes([i % 251]) * body_len,
            queue_id=i % 4,
            queue_offset=i,
            properties={"TAGS": f"tag{i % 3}", "KEYS": f"k{i:03d} x", "UNIQ_KEY": f"U{i:031d}"},
            store_timestamp_ms=1000 + i if store_ts is None else store_ts,
            store_host=STORE_HOST,
        )
    )


REC = len(record(0))  # 361 bytes: 11 records + a blank fit in a 4 KiB file


def open_log(path: Path, fs: FileSystem | None = None) -> CommitLog:
    log = CommitLog(path, FILE_SIZE, fs)
    log.load()
    log.recover_normally(check_crc=True)
    return log


def test_append_and_read_back(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_record(record(0))
    second = log.append_record(record(1))
    assert (first, second) == (0, len(record(0)))
    assert log.max_offset == 2 * len(record(0))
    view = log.get_message(second)
    assert view is not None
    assert view.commitlog_offset == second
    assert view.body == bytes([1]) * 200
    assert view.msg_id == ids.encode_msg_id(STORE_HOST, second)
    assert log.read_store_timestamp(second) == 1001
    assert log.get_message(second + 1) is None
    assert log.read(log.max_offset, 10) is None
    assert log.flush() == log.max_offset == log.flushed_offset
    log.close()


def test_rolling_writes_blank_record_and_patches_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    size = REC
    offsets = [log.append_record(record(i)) for i in range(25)]
    assert offsets[11] == FILE_SIZE
    assert offsets[22] == 2 * FILE_SIZE
    blank = (tmp_path / "00000000000000000000").read_bytes()[11 * size : 11 * size + 8]
    assert blank == codec.encode_blank(FILE_SIZE - 11 * size)
    for i, offset in enumerate(offsets):
        view = log.get_message(offset)
        assert view is not None
        assert (view.commitlog_offset, view.queue_offset) == (offset, i)
    log.close()


def test_batch_straddling_files_is_split_and_patched(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_record(record(0))
    batch = EncodedBatch.from_records([record(i) for i in range(1, 30)])
    result = log.append(batch, store_timestamp_ms=77)
    offsets = result.commitlog_offsets.tolist()
    assert offsets[:10] == [REC * i for i in range(1, 11)]
    assert offsets[10] == FILE_SIZE
    assert offsets[21] == 2 * FILE_SIZE
    assert result.end_offset == log.max_offset == 2 * FILE_SIZE + 8 * REC
    assert result.wrote_bytes == 29 * REC + 2 * 8
    for i, offset in enumerate(offsets, start=1):
        view = log.get_message(offset)
        assert view is not None
        assert (view.commitlog_offset, view.store_timestamp_ms, view.queue_offset) == (offset, 77, i)
    scanned = list(log.scan(0, check_crc=True, max_records=7))
    assert [len(b) for b in scanned] == [7, 4, 7, 4, 7, 1]  # chunks never cross a file end
    assert np.concatenate([b.commitlog_offsets for b in scanned]).tolist() == [0, *offsets]
    log.close()


def test_record_larger_than_a_file_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(MessageTooLarge, match="cannot fit"):
        log.append_record(record(0, body_len=FILE_SIZE))
    assert log.max_offset == 0
    log.close()


@pytest.mark.parametrize(("kind", "nth"), [("create", 1), ("write", 2), ("write", 3)])
def test_failed_append_leaves_nothing_behind(tmp_path: Path, kind: str, nth: int) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    for i in range(5):
        log.append_record(record(i))
    before = log.max_offset
    first_file = (tmp_path / "00000000000000000000").read_bytes()
    fs.fail_nth(kind, nth, errno.ENOSPC)
    with pytest.raises(StoreNotWritable, match="nothing written"):
        log.append(EncodedBatch.from_records([record(i) for i in range(5, 20)]))
    assert log.max_offset == before
    assert (tmp_path / "00000000000000000000").read_bytes() == first_file
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000"]
    # the log stays usable and a reopen sees exactly the five records
    assert log.append_record(record(5)) == before
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.max_offset == before + REC
    reopened.close()


def test_scan_fills_every_dispatch_field(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_record(record(0, topic="a"))
    log.append_record(record(1, topic="b"))
    log.append_record(encode_record(RecordFields(topic="a", body=b"", store_timestamp_ms=5)))
    (batch,) = log.scan(0)
    small = REC - len("orders") + 1
    assert batch.commitlog_offsets.tolist() == [0, small, 2 * small]
    assert batch.sizes.tolist() == [small, small, 92]
    assert batch.tags_codes.tolist() == [java_string_hash("tag0"), java_string_hash("tag1"), 0]
    assert batch.queue_ids.tolist() == [0, 1, 0]
    assert batch.queue_offsets.tolist() == [0, 1, 0]
    assert batch.store_timestamps_ms.tolist() == [1000, 1001, 5]
    assert batch.topics == ("a", "b")
    assert batch.topic_codes.tolist() == [0, 1, 0]
    assert batch.uniq_keys == (f"U{0:031d}", f"U{1:031d}", None)
    assert batch.keys == ("k000 x", "k001 x", None)
    assert batch.end_offset == log.max_offset
    (hooked,) = log.scan(small, tags_codes_for=lambda topics, codes, qids, ts, hashes: ts * 2)
    assert hooked.tags_codes.tolist() == [2002, 10]
    log.close()


def test_clean_reopen_recovers_to_the_same_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(30):
        log.append_record(record(i))
    end = log.max_offset
    log.flush()
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.max_offset == end
    assert reopened.last_recovery is not None
    assert "end of data" in reopened.last_recovery.reason
    assert reopened.append_record(record(30)) == end
    reopened.close()


def _damaged(tmp_path: Path, damage: str) -> tuple[int, int]:
    """Write 25 records (3 files), damage record 23; returns (its offset, file position)."""
    log = open_log(tmp_path)
    offsets = [log.append_record(record(i)) for i in range(25)]
    log.close()
    path = tmp_path / "00000000000000008192"
    data = bytearray(path.read_bytes())
    position = offsets[23] - 2 * FILE_SIZE
    if damage == "truncate":
        data = data[: position + 100]
    elif damage == "flip":
        data[position + codec.BODY_POS + 5] ^= 0xFF
    elif damage == "zero":
        data[position:] = bytes(len(data) - position)
    path.write_bytes(bytes(data))
    return offsets[23], position


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("truncate", "do not add up"), ("flip", "body CRC mismatch"), ("zero", "end of data")],
)
def test_recovery_stops_at_first_bad_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str, reason: str
) -> None:
    offset, position = _damaged(tmp_path, damage)
    log = CommitLog(tmp_path, FILE_SIZE)
    log.load()
    with caplog.at_level(logging.INFO, logger="sparkmq.store"):
        end = log.recover_abnormally(min_timestamp_ms=10**12, check_crc=True)
    assert end == offset == log.max_offset
    assert log.last_recovery is not None
    assert log.last_recovery.start_offset == 2 * FILE_SIZE  # newest file older than the checkpoint
    assert reason in log.last_recovery.reason
    messages = [r.getMessage() for r in caplog.records]
    line = next(m for m in messages if "commitlog recovery" in m)
    assert "00000000000000008192" in line
    assert str(offset) in line
    assert reason in line
    if damage != "zero":
        assert f"position {position}" in line
    assert (tmp_path / "00000000000000008192").read_bytes()[position:] == bytes(FILE_SIZE - position)
    assert log.get_message(offset - REC) is not None
    assert log.append_record(record(99)) == offset
    log.close()


def test_abnormal_recovery_starts_from_checkpoint_file(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(33):
        log.append_record(record(i, store_ts=1000 * (i // 11 + 1)))  # files start at 1000/2000/3000
    end = log.max_offset
    log.close()
    for min_ts, start in [(2500, FILE_SIZE), (999, 0), (10**9, 2 * FILE_SIZE)]:
        reopened = CommitLog(tmp_path, FILE_SIZE)
        reopened.load()
        assert reopened.recover_abnormally(min_ts, check_crc=True) == end
        assert reopened.last_recovery is not None
        assert reopened.last_recovery.start_offset == start
        reopened.close()


def test_normal_recovery_checks_only_the_last_three_files(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    offsets = [log.append_record(record(i)) for i in range(50)]  # 5 files
    log.close()
    reopened = CommitLog(tmp_path, FILE_SIZE)
    reopened.load()
    assert reopened.recover_normally(check_crc=True) == offsets[-1] + REC
    assert reopened.last_recovery is not None
    assert reopened.last_recovery.start_offset == 2 * FILE_SIZE
    reopened.close()


def test_truncate_and_delete_expired(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    offsets = [log.append_record(record(i)) for i in range(40)]
    log.truncate(offsets[30])
    assert log.max_offset == offsets[30]
    assert log.get_message(offsets[31]) is None
    for path in sorted(tmp_path.iterdir())[:2]:
        os.utime(path, ns=(0, 0))
    assert log.delete_expired_files(expired_before_ms=1) == 2
    assert log.min_offset == 2 * FILE_SIZE
    assert log.get_message(offsets[0]) is None
    assert log.get_message(offsets[25]) is not None
    log.close()


def test_zero_copy_view_survives_deletion(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    offsets = [log.append_record(record(i)) for i in range(30)]
    view = log.view(offsets[1], REC)
    assert bytes(view) == record(1)[:28] + offsets[1].to_bytes(8, "big") + record(1)[36:]
    assert log.file_size_bytes == FILE_SIZE
    os.utime(tmp_path / "00000000000000000000", ns=(0, 0))
    assert log.delete_expired_files(expired_before_ms=1) == 1
    assert record_check.decode_record(view).queue_offset == 1  # still mapped while the view lives
    with pytest.raises(DataLost):
        log.view(offsets[1], REC)
    with pytest.raises(DataLost):
        log.view(log.max_offset, 1)
    log.close()


def test_read_only_follower_sees_new_and_deleted_files(tmp_path: Path) -> None:
    writer = open_log(tmp_path)
    offsets = [writer.append_record(record(i)) for i in range(5)]
    follower = CommitLog(tmp_path, FILE_SIZE)
    follower.load(read_only=True)
    assert record_check.decode_record(follower.view(offsets[4], REC)).queue_offset == 4
    offsets += [writer.append_record(record(i)) for i in range(5, 30)]  # two more files
    assert record_check.decode_record(follower.view(offsets[29], REC)).queue_offset == 29
    with pytest.raises(StoreNotWritable, match="read-only"):
        follower.append_record(record(0))
    os.utime(tmp_path / "00000000000000000000", ns=(0, 0))
    writer.delete_expired_files(expired_before_ms=1)
    follower.refresh()
    assert follower.min_offset == FILE_SIZE
    follower.close()
    writer.close()


@settings(max_examples=100, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=400), min_size=1, max_size=25),
    topics=st.lists(st.sampled_from(["a", "orders", "t" * 140]), min_size=25, max_size=25),
    damage=st.one_of(st.none(), st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255))),
    chunk_bytes=st.sampled_from([200, 1000, 1 << 20]),
    same_size=st.booleans(),
)
def test_vectorised_walk_agrees_with_check_record(
    bodies: list[bytes],
    topics: list[str],
    damage: tuple[float, int] | None,
    chunk_bytes: int,
    same_size: bool,
) -> None:
    file_size = 1 << 16
    if same_size:  # one layout: exercises the strided walk
        bodies = [bytes([i]) * len(bodies[0]) for i in range(len(bodies))]
        topics = [topics[0]] * len(topics)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        log = CommitLog(directory, file_size)
        log.load()
        for i, body in enumerate(bodies):
            props = {"TAGS": f"t{i:02d}", "UNIQ_KEY": f"u{i:02d}"}
            log.append_record(encode_record(RecordFields(topics[i], body, queue_offset=i, properties=props)))
        end = log.max_offset
        log.close()
        path = directory / "00000000000000000000"
        data = bytearray(path.read_bytes())
        if damage is not None:
            data[int(damage[0] * end)] ^= damage[1]
            path.write_bytes(bytes(data))
        expected, checks, position = [], [], 0
        while (
            check := record_check.check_record(data, position, check_crc=True)
        ).status is record_check.RecordStatus.OK:
            expected.append(position)
            checks.append(check)  # the damage may hit a topic or a property: no CRC covers them
            position += check.size
        saved, commitlog_module.SCAN_CHUNK_BYTES = commitlog_module.SCAN_CHUNK_BYTES, chunk_bytes
        try:
            reopened = CommitLog(directory, file_size)
            reopened.load()
            assert reopened.recover_abnormally(0, check_crc=True) == position
            scanned = list(reopened.scan(0, check_crc=True))
            offsets = np.concatenate([b.commitlog_offsets for b in scanned]).tolist() if scanned else []
            assert offsets == expected
            for batch in scanned:
                for row, offset in enumerate(batch.commitlog_offsets.tolist()):
                    reference = checks[expected.index(offset)]
                    props = reference.properties or {}
                    assert batch.topics[batch.topic_codes[row]] == reference.topic
                    assert batch.tags_codes[row] == java_string_hash(props.get("TAGS", ""))
                    assert batch.uniq_keys[row] == props.get("UNIQ_KEY")
                    assert batch.sizes[row] == reference.size
            reopened.close()
        finally:
            commitlog_module.SCAN_CHUNK_BYTES = saved


def test_rollback_that_cannot_write_makes_the_log_refuse_appends(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    log = open_log(tmp_path, fs)
    log.append_record(record(0))
    fs.fail_nth("write", 2, persistent=True)  # the disk fills up in the middle of the batch
    batch = EncodedBatch.from_records([record(i) for i in range(1, 20)])
    with pytest.raises(StoreNotWritable, match="could not be undone"):
        log.append(batch)
    fs.heal()
    with pytest.raises(StoreNotWritable, match="not writable"):
        log.append_record(record(20))
    log.close()


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(st.integers(0, 700), min_size=1, max_size=8)),
            st.tuples(st.just("flush"), st.just([0])),
        ),
        min_size=1,
        max_size=20,
    ),
    torn_seed=st.one_of(st.none(), st.integers(0, 2**32)),
)
def test_crash_and_reopen_keeps_every_flushed_record(
    steps: list[tuple[str, list[int]]], torn_seed: int | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        fs = FaultyFileSystem(track_unsynced=True)
        log = open_log(directory, fs)
        written: dict[int, bytes] = {}
        synced_end, counter = 0, 0
        for kind, body_lens in steps:
            if kind == "flush":
                synced_end = log.flush()
                continue
            batch = EncodedBatch.from_records([record(counter + k, n) for k, n in enumerate(body_lens)])
            counter += len(body_lens)
            result = log.append(batch, store_timestamp_ms=counter)
            for i, offset in enumerate(result.commitlog_offsets.tolist()):
                written[offset] = batch.record(i)
        written_end = log.max_offset
        log.close()
        fs.crash(random.Random(torn_seed) if torn_seed is not None else None)

        reopened = CommitLog(directory, FILE_SIZE, fs)
        reopened.load()
        end = reopened.recover_abnormally(0, check_crc=True)
        assert synced_end <= end <= written_end
        boundaries = {o + len(r) for o, r in written.items()} | {0}
        assert end in boundaries or end % FILE_SIZE == 0
        for offset, raw in written.items():
            if offset + len(raw) <= synced_end:
                assert reopened.read(offset, len(raw)) == raw
        scanned = [o for b in reopened.scan(0) for o in b.commitlog_offsets.tolist()]
        assert scanned == sorted(o for o in written if o < end)
        offset = reopened.append_record(record(999))
        reopened.close()

        again = CommitLog(directory, FILE_SIZE, fs)
        again.load()
        assert again.recover_normally(check_crc=True) == offset + REC
        again.close()


def test_concurrent_appends_flushes_and_scans(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    writers, batches, per_batch = 4, 40, 5
    done = threading.Event()
    errors: list[BaseException] = []

    def write(thread: int) -> None:
        try:
            for b in range(batches):
                tags = [thread * 10_000 + b * per_batch + k for k in range(per_batch)]
                log.append(EncodedBatch.from_records([record(t, body_len=50) for t in tags]))
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    def flush_and_scan() -> None:
        try:
            while not done.is_set():
                log.flush()
                offsets = [o for b in log.scan(0) for o in b.commitlog_offsets.tolist()]
                assert offsets == sorted(set(offsets))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(writers)]
    background = threading.Thread(target=flush_and_scan)
    background.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    done.set()
    background.join(timeout=30)
    assert not errors
    (offsets, queue_offsets) = ([], [])
    for batch in log.scan(0, check_crc=True):
        offsets += batch.commitlog_offsets.tolist()
        queue_offsets += batch.queue_offsets.tolist()
    assert len(offsets) == writers * batches * per_batch
    assert sorted(queue_offsets) == sorted(
        t * 10_000 + i for t in range(writers) for i in range(batches * per_batch)
    )
    for offset in offsets[::37]:
        view = log.get_message(offset)
        assert view is not None
        assert view.commitlog_offset == offset
    assert log.flush() == log.max_offset
    log.close()
