"""The truncation procedure: CommitLog, ConsumeQueues, index, checkpoint and epoch file cut at one
record boundary; durable before it returns (a simulated power loss does not bring the tail back),
and ``kill -9`` right after it (or after its first step only) does not resurrect the tail on
restart, unlike RocketMQ's in-memory truncation (apache/rocketmq#10666)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store import Message, MessageStore
from store.errors import InvalidArgument
from store.ha import (
    EpochEntry,
    EpochFile,
    HAConfig,
    InMemorySyncStateAuthority,
    ReplicaController,
    truncate_replica,
)
from store.io.fs import FaultyFileSystem
from store.metadata.checkpoint import CONFIRM_OFFSET_POS, LONG_FIELD
from tests.support.stores import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def fill(directory: Path, fs: FaultyFileSystem | None = None) -> tuple[MessageStore, ReplicaController]:
    """A replicated store that led epochs 1 and 2: ~5 CommitLog files of keyed messages."""
    store = MessageStore.open(tiny_config(directory, replicated=True), fs=fs)
    controller = ReplicaController(store, HAConfig(broker_id=1), InMemorySyncStateAuthority())
    controller.become_master(1)
    for i in range(400):
        store.put_message(
            Message(topic="orders", body=bytes([i % 256]) * (300 + i), queue_id=i % 4, keys=(f"k{i}",))
        )
        if i == 299:
            controller.fence("a failover")
            controller.become_master(2)
    return store, controller


def records(store: MessageStore) -> list[tuple[int, int, int, str]]:
    """(commitlog offset, size, queue id, key) of every stored message, in log order."""
    out = []
    for queue_id in range(4):
        got = store.get_messages("orders", queue_id, 0, 10_000)
        out += [(m.commitlog_offset, m.size_bytes, queue_id, m.keys[0]) for m in got.messages]
    return sorted(out)


def expected_after(before: list[tuple[int, int, int, str]], point: int) -> dict[int, int]:
    kept = [r for r in before if r[0] + r[1] <= point]
    return {q: sum(1 for r in kept if r[2] == q) for q in range(4)}


def test_one_procedure_cuts_every_structure(tmp_path: Path) -> None:
    store, controller = fill(tmp_path / "store")
    before = records(store)
    epoch2_start = controller.epochs.entries[1].start_offset
    point = next(offset for offset, _, _, _ in before if offset > epoch2_start - 70_000)
    old_max = store.commitlog_max_offset
    controller.fence("truncating")
    report = truncate_replica(store.replica_log(), controller.epochs, point, "test")
    assert (report.point, report.dropped_bytes) == (point, old_max - point)
    assert report.dropped_epochs == (EpochEntry(2, epoch2_start),)
    assert controller.epochs.entries == (EpochEntry(1, 0),)
    assert store.commitlog_max_offset == point
    size = store.config.commitlog_file_size_bytes
    files = sorted((tmp_path / "store" / "commitlog").iterdir())
    assert int(files[-1].name) == point - point % size  # later files are gone
    assert files[-1].read_bytes()[point % size :] == bytes(size - point % size)  # the tail is zero on disk
    counts = expected_after(before, point)
    assert {q: store.max_offset("orders", q) for q in range(4)} == counts
    first_dropped = next(r for r in before if r[0] >= point)
    assert store.query_by_key("orders", first_dropped[3]) == []
    assert store.query_by_key("orders", "k3")
    page = (tmp_path / "store" / "checkpoint").read_bytes()
    assert LONG_FIELD.unpack_from(page, CONFIRM_OFFSET_POS)[0] <= point
    controller.become_master(3)  # the next epoch starts exactly at the point
    result = store.put_message(Message(topic="orders", body=b"after", queue_id=first_dropped[2]))
    assert (result.commitlog_offset, result.queue_offset) == (point, counts[first_dropped[2]])
    assert controller.epochs.entries == (EpochEntry(1, 0), EpochEntry(3, point))
    controller.close()
    store.close()


def test_a_point_inside_a_record_is_refused(tmp_path: Path) -> None:
    store, controller = fill(tmp_path / "store")
    offset, _, _, _ = records(store)[10]
    with pytest.raises(InvalidArgument, match="not a record boundary"):
        truncate_replica(store.replica_log(), controller.epochs, offset + 7, "test")
    controller.close()
    store.close()


def test_truncation_survives_a_power_loss(tmp_path: Path) -> None:
    fs = FaultyFileSystem(track_unsynced=True)
    store, controller = fill(tmp_path / "store", fs)
    store.flush()  # everything durable, the records beyond the point included
    before = records(store)
    point = before[len(before) // 2][0]
    controller.fence("truncating")
    truncate_replica(store.replica_log(), controller.epochs, point, "test")
    controller.close()
    store.abandon()  # the process dies: nothing more is flushed
    fs.crash()  # and the power goes: every byte not fsynced is lost
    reopened = MessageStore.open(tiny_config(tmp_path / "store", replicated=True))
    try:
        assert reopened.commitlog_max_offset == point
        assert records(reopened) == [r for r in before if r[0] < point]
    finally:
        reopened.close()


CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from store import MessageStore
    from store.ha import EpochFile, truncate_replica
    from tests.support.stores import tiny_config

    directory, point, steps = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    store = MessageStore.open(tiny_config(directory, replicated=True))
    if steps == "all":
        truncate_replica(store.replica_log(), EpochFile(directory), point, "kill test")
    else:  # only the first step, the CommitLog: a kill in the middle of the procedure
        log = store.replica_log()
        with log.exclusive():
            log.cut_commitlog(point, "kill test: first step only")
    print("TRUNCATED", flush=True)
    time.sleep(120)
    """
)


@pytest.mark.slow  # starts a process
@pytest.mark.parametrize("steps", ["all", "first"])
def test_kill_9_right_after_truncation_does_not_resurrect_the_tail(tmp_path: Path, steps: str) -> None:
    directory = tmp_path / "store"
    store, controller = fill(directory)
    before = records(store)
    epoch2_start = controller.epochs.entries[1].start_offset
    point = next(offset for offset, _, _, _ in before if offset > epoch2_start - 50_000)
    controller.close()
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(point), steps],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"TRUNCATED"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert (directory / "abort").exists()  # it died: the next open recovers abnormally
    reopened = MessageStore.open(tiny_config(directory, replicated=True))
    controller = ReplicaController(reopened, HAConfig(broker_id=1), InMemorySyncStateAuthority())
    try:
        assert reopened.commitlog_max_offset == point
        assert records(reopened) == [r for r in before if r[0] < point]
        assert controller.epochs.entries == (EpochEntry(1, 0),)  # epoch 2 started past the end
        assert EpochFile(directory).entries == (EpochEntry(1, 0),)
    finally:
        controller.close()
        reopened.close()
