"""Crash, damage and reboot; the directory lock; flush modes; disk faults; retention."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from store import FlushDiskType, GetStatus, Message, MessageStore, StoreLocked, StoreNotWritable
from store.config import StoreConfig
from store.io.fs import FaultyFileSystem
from tests.support.stores import ManualClock, tiny_config

OpenStore = Callable[..., MessageStore]


def _fill(ms: MessageStore, n: int, topic: str = "t", queue_id: int = 0) -> None:
    ms.put_messages([Message(topic=topic, body=b"msg-%05d" % i, queue_id=queue_id) for i in range(n)])


def _bodies(ms: MessageStore, topic: str = "t", queue_id: int = 0) -> list[bytes]:
    return list(
        ms.read_batch(topic, queue_id, ms.min_offset(topic, queue_id), 100_000)
        .batch.column("body")
        .to_pylist()
    )


def _commitlog_files(ms_dir: Path) -> list[Path]:
    return sorted((ms_dir / "commitlog").iterdir())


def test_clean_close_leaves_no_abort_and_reopens(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert cfg.abort_path.exists()
    _fill(ms, 500)
    ms.close()
    assert not cfg.abort_path.exists()
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.recovery is not None and not ms.recovery.abnormal
    assert _bodies(ms) == [b"msg-%05d" % i for i in range(500)]
    ms.put_message(Message(topic="t", body=b"after", queue_id=0))
    assert ms.max_offset("t", 0) == 501
    ms.close()


def test_crash_then_abnormal_recovery_keeps_everything(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    _fill(ms, 300)
    ms.abandon()  # as after kill -9: nothing flushed, abort left behind
    assert cfg.abort_path.exists()
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.recovery is not None and ms.recovery.abnormal
    assert _bodies(ms) == [b"msg-%05d" % i for i in range(300)]
    assert ms.put_message(Message(topic="t", body=b"x", queue_id=0)).queue_offset == 300
    ms.close()


def test_truncated_mid_record_is_cut_at_the_last_whole_record(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = tiny_config(tmp_path, commitlog_file_size_bytes=1 << 20)
    ms = MessageStore.open(cfg, clock_ms=clock)
    results = ms.put_messages([Message(topic="t", body=b"m%03d" % i, queue_id=0) for i in range(100)])
    ms.abandon()
    last = results[-1]
    (log_file,) = _commitlog_files(tmp_path)
    with open(log_file, "r+b") as f:  # tear the last record: zero its second half
        f.seek(last.commitlog_offset + last.size_bytes // 2)
        f.write(b"\0" * (last.size_bytes - last.size_bytes // 2))
    with caplog.at_level(logging.INFO, logger="sparkmq.store"):
        ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.recovery is not None and ms.recovery.end_offset == last.commitlog_offset
    assert _bodies(ms) == [b"m%03d" % i for i in range(99)]
    assert ms.put_message(Message(topic="t", body=b"new", queue_id=0)).queue_offset == 99
    assert any(
        str(log_file) in r.getMessage() and "truncat" in r.getMessage().lower() for r in caplog.records
    )
    ms.close()


def test_flipped_body_byte_fails_crc_and_truncates(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = tiny_config(tmp_path, commitlog_file_size_bytes=1 << 20)
    ms = MessageStore.open(cfg, clock_ms=clock)
    results = ms.put_messages([Message(topic="t", body=b"body-%03d" % i, queue_id=0) for i in range(50)])
    ms.abandon()
    victim = results[30]
    (log_file,) = _commitlog_files(tmp_path)
    with open(log_file, "r+b") as f:
        f.seek(victim.commitlog_offset + 88)  # first body byte
        byte = f.read(1)
        f.seek(victim.commitlog_offset + 88)
        f.write(bytes([byte[0] ^ 0xFF]))
    with caplog.at_level(logging.WARNING, logger="sparkmq.store"):
        ms = MessageStore.open(cfg, clock_ms=clock)
    assert _bodies(ms) == [b"body-%03d" % i for i in range(30)]
    assert any("CRC" in r.getMessage() for r in caplog.records)
    ms.close()


def test_deleted_checkpoint_and_removed_abort_still_recover(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    _fill(ms, 400)
    ms.abandon()
    cfg.checkpoint_path.unlink()
    ms = MessageStore.open(cfg, clock_ms=clock)  # abort present, checkpoint gone: scan from the start
    assert _bodies(ms) == [b"msg-%05d" % i for i in range(400)]
    ms.abandon()
    cfg.abort_path.unlink()  # crash, but the abort file is gone too: normal recovery
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.recovery is not None and not ms.recovery.abnormal
    assert _bodies(ms) == [b"msg-%05d" % i for i in range(400)]
    ms.close()


def test_consume_queues_and_index_rebuild_from_the_commitlog(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.put_messages([Message(topic="t", body=b"%d" % i, keys=(f"k{i}",), queue_id=i % 3) for i in range(200)])
    before = [_bodies(ms, queue_id=q) for q in range(3)]
    assert ms.rebuild_indexes() == 200
    assert [_bodies(ms, queue_id=q) for q in range(3)] == before
    assert ms.query_by_key("t", "k42")[0].body == b"42"
    ms.close()
    import shutil

    shutil.rmtree(cfg.consume_queue_dir)
    shutil.rmtree(cfg.index_dir)
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert [_bodies(ms, queue_id=q) for q in range(3)] == before
    assert ms.query_by_key("t", "k199")[0].body == b"199"
    ms.close()


def test_kill_9_of_a_writer_process_loses_nothing_acknowledged(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    ready = tmp_path / "acked"
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from store import MessageStore, StoreConfig, Message
        cfg = StoreConfig(store_dir=Path({str(store_dir)!r}), commitlog_file_size_bytes=1 << 20)
        ms = MessageStore.open(cfg)
        ms.create_topic("t", 1)
        acked = open({str(ready)!r}, "w")
        i = 0
        while True:
            ms.put_message(Message(topic="t", body=b"m-%d" % i, queue_id=0))
            acked.write(f"{{i}}\\n"); acked.flush()
            i += 1
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not ready.exists() or ready.stat().st_size < 2000):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acked = [int(x) for x in ready.read_text().split()]
    assert len(acked) > 100
    with MessageStore.open(StoreConfig(store_dir=store_dir, commitlog_file_size_bytes=1 << 20)) as ms:
        assert ms.recovery is not None and ms.recovery.abnormal
        bodies = _bodies(ms)
        assert bodies[: len(acked)] == [b"m-%d" % i for i in acked]
        assert len(bodies) in (len(acked), len(acked) + 1)  # the one in flight may or may not be there


def test_second_process_gets_a_clear_lock_error(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path)
    with MessageStore.open(cfg):
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path\n"
                "from store import MessageStore, StoreConfig, StoreLocked\n"
                "try:\n"
                f"    MessageStore.open(StoreConfig(store_dir=Path({str(tmp_path)!r})))\n"
                "except StoreLocked as e:\n"
                "    print('LOCKED', e); sys.exit(3)\n",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert probe.returncode == 3, probe.stderr
        assert "in use by another process" in probe.stdout and str(os.getpid()) in probe.stdout
        with pytest.raises(StoreLocked):
            MessageStore.open(cfg)  # a second open in the same process is refused too
    with MessageStore.open(cfg):  # released on close
        pass


def test_sync_flush_fsyncs_before_returning(tmp_path: Path, clock: ManualClock) -> None:
    ms = MessageStore.open(tiny_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH), clock_ms=clock)
    r = ms.put_message(Message(topic="t", body=b"durable", queue_id=0))
    assert ms._commitlog.flushed_offset >= r.commitlog_offset + r.size_bytes
    assert ms._group_commit is not None and ms._group_commit.fsyncs >= 1
    ms.close()


def test_disk_full_writes_nothing_and_recovers_when_space_returns(tmp_path: Path, clock: ManualClock) -> None:
    fs = FaultyFileSystem()
    ms = MessageStore.open(tiny_config(tmp_path), clock_ms=clock, fs=fs)
    _fill(ms, 10)
    fs.fail_nth("write", 1, errno.ENOSPC)
    with pytest.raises(StoreNotWritable):
        ms.put_messages([Message(topic="t", body=b"lost?", queue_id=0)] * 5)
    assert ms.max_offset("t", 0) == 10
    assert ms.put_message(Message(topic="t", body=b"after", queue_id=0)).queue_offset == 10
    assert _bodies(ms)[-1] == b"after"
    ms.close()


def test_retention_deletes_old_files_and_moves_min_offsets(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path, file_reserved_time_hours=1.0)
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.put_messages([Message(topic="t", body=b"x" * 900, queue_id=0) for _ in range(300)])
    files_before = len(_commitlog_files(tmp_path))
    assert files_before > 3
    assert ms.run_retention(now_ms=clock.now_ms, force=True) == 0  # nothing is old yet
    future = int(time.time() * 1000) + 2 * 3_600_000
    deleted = ms.run_retention(now_ms=future, force=True)
    assert deleted >= 1 and len(_commitlog_files(tmp_path)) == files_before - deleted
    low = ms.min_offset("t", 0)
    assert low > 0
    assert ms.get_messages("t", 0, 0).status is GetStatus.OFFSET_TOO_SMALL
    assert ms.read_batch("t", 0, low, 10_000).batch.num_rows == 300 - low
    ms.close()
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.min_offset("t", 0) == low
    ms.close()


def test_periodic_services_flush_and_checkpoint(tmp_path: Path) -> None:
    cfg = tiny_config(
        tmp_path, background_services=True, flush_interval_ms=10, flush_consume_queue_interval_ms=10
    )
    with MessageStore.open(cfg) as ms:
        r = ms.put_message(Message(topic="t", body=b"x", queue_id=0))
        deadline = time.monotonic() + 20
        while (
            time.monotonic() < deadline
            and ms._checkpoint.values.logics_msg_timestamp_ms < r.store_timestamp_ms
        ):
            time.sleep(0.01)
        assert ms._checkpoint.values.physic_msg_timestamp_ms >= r.store_timestamp_ms
        assert ms._checkpoint.values.logics_msg_timestamp_ms >= r.store_timestamp_ms
        assert ms._commitlog.flushed_offset >= r.commitlog_offset + r.size_bytes


def test_store_config_validation_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="flush_interval_ms"):
        StoreConfig(store_dir=tmp_path, flush_interval_ms=0).validate()


def test_the_layout_is_recorded_and_adopted(tmp_path: Path, clock: ManualClock) -> None:
    """A directory keeps the file sizes it was created with, whoever opens it later."""
    from store import StoreReader, existing_config

    created = tiny_config(tmp_path, commitlog_file_size_bytes=32 * 1024, index_hash_slots=31)
    with MessageStore.open(created, clock_ms=clock) as ms:
        _fill(ms, 200)
    assert existing_config(tmp_path).commitlog_file_size_bytes == 32 * 1024
    assert existing_config(tmp_path).index_hash_slots == 31
    with MessageStore.open(StoreConfig(store_dir=tmp_path, background_services=False), clock_ms=clock) as ms:
        assert ms.config.commitlog_file_size_bytes == 32 * 1024  # the default (1 GiB) was not used
        assert _bodies(ms) == [b"msg-%05d" % i for i in range(200)]
        _fill(ms, 10)
    with StoreReader(tmp_path) as reader:
        assert reader.config.consume_queue_units_per_file == 64
        assert reader.read_batch("t", 0, 0, 1000).batch.num_rows == 210


def test_commitlog_files_are_sparse_unless_preallocation_is_asked(tmp_path: Path, clock: ManualClock) -> None:
    for preallocate, name in ((False, "sparse"), (True, "preallocated")):
        # sparse: appends allocate one RESERVE_STEP_BYTES (1 MiB) ahead, not the whole file
        cfg = tiny_config(tmp_path / name, commitlog_file_size_bytes=4 << 20, preallocate_files=preallocate)
        with MessageStore.open(cfg, clock_ms=clock) as ms:
            _fill(ms, 10)
        (log_file,) = _commitlog_files(tmp_path / name)
        allocated = log_file.stat().st_blocks * 512
        assert log_file.stat().st_size == 4 << 20
        assert (allocated >= 4 << 20) is preallocate, (name, allocated)


def test_clean_open_resumes_at_the_last_dispatched_record_but_verifies_it(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg = tiny_config(tmp_path, commitlog_file_size_bytes=1 << 20)
    ms = MessageStore.open(cfg, clock_ms=clock)
    results = ms.put_messages([Message(topic="t", body=b"m%03d" % i, queue_id=0) for i in range(50)])
    ms.close()
    ms = MessageStore.open(cfg, clock_ms=clock)  # clean open: the walk starts at the last record
    assert ms.recovery is not None and ms.recovery.check_from_offset == results[-1].commitlog_offset
    ms.close()
    last = results[-1]
    (log_file,) = _commitlog_files(tmp_path)
    with open(log_file, "r+b") as f:  # the record the ConsumeQueue points at is gone
        f.seek(last.commitlog_offset)
        f.write(b"\0" * last.size_bytes)
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.recovery is not None and ms.recovery.check_from_offset == 0  # hint refused: full walk
    assert _bodies(ms) == [b"m%03d" % i for i in range(49)]
    assert ms.put_message(Message(topic="t", body=b"next", queue_id=0)).queue_offset == 49
    ms.close()


def test_a_refusal_after_the_append_says_the_write_is_in_the_log(tmp_path: Path, clock: ManualClock) -> None:
    """SYNC_FLUSH with a failing fsync: the put is refused, but the record is in the log
    (``appended``), so an idempotent door counts its sequence as taken and a retry finds it. A
    refusal before the append (the disk full for the CommitLog) says nothing was written."""
    fs = FaultyFileSystem()
    cfg = tiny_config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=2000)
    with MessageStore.open(cfg, clock_ms=clock, fs=fs) as ms:
        _fill(ms, 2)
        fs.fail_nth("fsync", 1, persistent=True)
        with pytest.raises(StoreNotWritable) as after:
            ms.put_message(Message(topic="t", body=b"in the log", queue_id=0))
        assert after.value.appended
        fs.heal()
        assert _bodies(ms)[-1] == b"in the log"
        fs.fail_nth("write", 1, errno.ENOSPC)
        with pytest.raises(StoreNotWritable) as before:
            ms.put_message(Message(topic="t", body=b"refused", queue_id=0))
        assert not before.value.appended
        assert _bodies(ms)[-1] == b"in the log"
