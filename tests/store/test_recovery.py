"""Abnormal recovery in one pass: what it rebuilds equals what the writer had written.

After a crash the CommitLog is checked from the checkpoint's file on and every run of records
that checks out is dispatched as the walk goes (files before it are replayed first). These
tests compare the derived structures with the ones the writer built, byte for byte.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from store import Message, MessageStore
from store.config import StoreConfig
from tests.support.stores import ManualClock, tiny_config

QUEUES = 3


def _put(ms: MessageStore, start: int, count: int) -> None:
    ms.put_messages(
        [
            Message(
                topic="t",
                body=b"body-%05d" % i,
                keys=(f"k{i}",),
                tags="a" if i % 2 else "b",
                queue_id=i % QUEUES,
            )
            for i in range(start, start + count)
        ]
    )


def _written_store(tmp_path: Path, clock: ManualClock) -> tuple[StoreConfig, int]:
    """A store spread over several CommitLog files whose checkpoint points at a middle file,
    abandoned as after kill -9; returns its config and how many messages it holds."""
    cfg = tiny_config(tmp_path / "store")
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.create_topic("t", QUEUES)
    _put(ms, 0, 600)
    clock.advance(10_000)
    ms.flush()  # the checkpoint: everything so far
    clock.advance(10_000)
    _put(ms, 600, 600)
    ms.flush()
    ms.abandon()
    assert len(list((cfg.store_dir / "commitlog").iterdir())) >= 3
    return cfg, 1200


def _queue_bytes(cfg: StoreConfig) -> dict[str, bytes]:
    root = cfg.store_dir / "consumequeue"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bodies(ms: MessageStore, queue_id: int) -> list[bytes]:
    return list(ms.read_batch("t", queue_id, 0, 100_000).batch.column("body").to_pylist())


def test_derived_structures_rebuilt_in_one_pass_equal_the_written_ones(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg, count = _written_store(tmp_path, clock)
    written = _queue_bytes(cfg)
    shutil.rmtree(cfg.store_dir / "consumequeue")
    shutil.rmtree(cfg.store_dir / "index")
    ms = MessageStore.open(cfg, clock_ms=clock)
    report = ms.recovery
    assert report is not None and report.abnormal and not report.consume_queues_rebuilt
    assert report.dispatch_from_offset < report.check_from_offset  # files before the check replayed
    assert report.records_dispatched == count
    ms.flush()
    assert _queue_bytes(cfg) == written
    assert [m.body for m in ms.query_by_key("t", "k7")] == [b"body-00007"]
    assert [m.body for m in ms.query_by_key("t", "k1100")] == [b"body-01100"]
    ms.close()


def test_queues_ahead_of_a_truncated_commitlog_lose_exactly_the_lost_records(
    tmp_path: Path, clock: ManualClock
) -> None:
    cfg, _ = _written_store(tmp_path, clock)
    files = sorted((cfg.store_dir / "commitlog").iterdir())
    last = files[-1]
    data = bytearray(last.read_bytes())
    data[90] ^= 0xFF  # the body of the file's first record: its CRC fails, the rest is lost
    last.write_bytes(bytes(data))
    ms = MessageStore.open(cfg, clock_ms=clock)
    report = ms.recovery
    assert report is not None and report.abnormal and not report.consume_queues_rebuilt
    bodies = sorted(b for q in range(QUEUES) for b in _bodies(ms, q))
    kept = len(bodies)
    assert 600 <= kept < 1200
    assert bodies == [b"body-%05d" % i for i in range(kept)]
    assert ms.query_by_key("t", f"k{kept}") == []  # no index entry or queue unit for a lost record
    ms.close()


def test_a_lagging_queue_is_rebuilt_from_the_commitlog(tmp_path: Path, clock: ManualClock) -> None:
    cfg, count = _written_store(tmp_path, clock)
    written = _queue_bytes(cfg)
    for path in sorted((cfg.store_dir / "consumequeue" / "t" / "1").iterdir())[1:]:
        path.unlink()  # queue 1 keeps its first file only: it lags behind the checked files
    ms = MessageStore.open(cfg, clock_ms=clock)
    report = ms.recovery
    assert report is not None and report.abnormal and report.consume_queues_rebuilt
    assert sum(len(_bodies(ms, q)) for q in range(QUEUES)) == count
    ms.flush()
    assert _queue_bytes(cfg) == written
    ms.close()
