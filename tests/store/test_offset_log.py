"""Consumer offsets as CommitLog records (``store.write.offset_log``): a commit is a record of
``rmq_sys_CONSUMER_OFFSETS``, the table is what those records say after a clean close, a crash,
a torn tail, a lost checkpoint and retention."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from store import CONSUMER_OFFSETS_TOPIC, Message, MessageStore, UnknownQueue
from store.format.offset_record import OffsetCommand, OffsetKind, decode_offset_command
from tests.support.stores import ManualClock, tiny_config

DAY_MS = 86_400_000


def open_store(path: Path, clock: ManualClock, **changes: object) -> MessageStore:
    return MessageStore.open(tiny_config(path, **changes), clock_ms=clock)


def offset_records(ms: MessageStore) -> list[tuple[int, OffsetCommand]]:
    """(CommitLog offset, decoded command) of every retained offset record."""
    low, high = ms.queue_offsets(CONSUMER_OFFSETS_TOPIC)[0]
    got = ms.get_messages(CONSUMER_OFFSETS_TOPIC, 0, low, max(1, high - low)).messages
    return [(m.commitlog_offset, decode_offset_command(m.body)) for m in got]


def table(ms: MessageStore) -> dict[tuple[str, str], dict[int, int]]:
    return {(g, t): ms.committed_offsets(g, t) for g, topics in ms.groups().items() for t in topics}


def checkpoint(path: Path) -> dict[str, object]:
    document = json.loads((path / "config" / "consumerOffset.json").read_text())
    assert isinstance(document, dict)
    return document


def test_one_commit_is_one_record_and_the_table_follows_it(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 8)
        ms.commit_offsets("billing", "orders", {q: 10 + q for q in range(8)})
        ms.commit_offset("billing", "orders", 3, 99)
        ((first_at, first), (_, second)) = offset_records(ms)
        assert first.kind is OffsetKind.COMMIT and first.offsets == {q: 10 + q for q in range(8)}
        assert second.offsets == {3: 99}
        assert ms.committed_offsets("billing", "orders") == {**{q: 10 + q for q in range(8)}, 3: 99}
        assert ms.groups() == {"billing": ["orders"]}
        assert CONSUMER_OFFSETS_TOPIC not in ms.topics()  # a system topic, hidden
        assert first_at >= 0


def test_bad_commits_write_nothing(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 2)
        with pytest.raises(UnknownQueue):
            ms.commit_offsets("billing", "orders", {2: 1})
        assert offset_records(ms) == []


def test_a_crash_loses_no_commit_the_checkpoint_missed(tmp_path: Path, clock: ManualClock) -> None:
    ms = open_store(tmp_path, clock)
    ms.create_topic("orders", 2)
    ms.commit_offsets("billing", "orders", {0: 1, 1: 1})
    ms.flush()  # the checkpoint covers the first commit
    covered = checkpoint(tmp_path)["commitLogOffset"]
    ms.commit_offsets("billing", "orders", {1: 7})
    ms.commit_offsets("audit", "orders", {0: 3})
    ms.abandon()  # kill -9: nothing persisted since the flush
    with open_store(tmp_path, clock) as ms:
        assert ms.committed_offsets("billing", "orders") == {0: 1, 1: 7}
        assert ms.committed_offsets("audit", "orders") == {0: 3}
    assert checkpoint(tmp_path)["commitLogOffset"] > covered  # type: ignore[operator]


def test_without_its_checkpoint_the_table_is_rebuilt_from_the_log(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 2)
        ms.create_topic("refunds", 1)
        ms.commit_offsets("billing", "orders", {0: 4, 1: 5})
        ms.commit_offsets("billing", "refunds", {0: 2})
        ms.commit_offsets("audit", "orders", {0: 1})
        ms.delete_group_offsets("billing", "refunds")
        ms.commit_offsets("audit", "orders", {0: 6})
        before = table(ms)
    (tmp_path / "config" / "consumerOffset.json").unlink()
    with open_store(tmp_path, clock) as ms:
        assert table(ms) == before
        assert before == {("audit", "orders"): {0: 6}, ("billing", "orders"): {0: 4, 1: 5}}


def test_deletes_are_records_too(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 1)
        ms.create_topic("refunds", 1)
        for group in ("a", "b"):
            for topic in ("orders", "refunds"):
                ms.commit_offsets(group, topic, {0: 1})
        assert ms.delete_group_offsets("a") == 2
        assert ms.delete_group_offsets("a") == 0  # nothing left: no record
        assert ms.delete_topic("refunds")
        kinds = [command.kind for _, command in offset_records(ms)]
        assert kinds[-2:] == [OffsetKind.DELETE_GROUP, OffsetKind.DELETE_TOPIC]
        ms.abandon()
    (tmp_path / "config" / "consumerOffset.json").unlink(missing_ok=True)
    with open_store(tmp_path, clock) as ms:
        assert ms.groups() == {"b": ["orders"]}


def test_a_torn_commit_at_the_end_of_the_log_is_ignored(tmp_path: Path, clock: ManualClock) -> None:
    ms = open_store(tmp_path, clock, commitlog_file_size_bytes=1 << 20)
    ms.create_topic("orders", 1)
    ms.commit_offsets("billing", "orders", {0: 5})
    ms.commit_offsets("billing", "orders", {0: 9})
    ms.flush()  # the checkpoint even covers the commit that is torn below
    torn = ms.get_messages(CONSUMER_OFFSETS_TOPIC, 0, 1, 1).messages[0]
    torn_at, size = torn.commitlog_offset, torn.size_bytes
    ms.abandon()
    (log_file,) = sorted((tmp_path / "commitlog").iterdir())
    with open(log_file, "r+b") as f:  # the last record reached the disk half written
        f.seek(torn_at + size // 2)
        f.write(b"\0" * (size - size // 2))
    with open_store(tmp_path, clock, commitlog_file_size_bytes=1 << 20) as ms:
        assert ms.recovery is not None and ms.recovery.end_offset == torn_at
        assert ms.committed_offsets("billing", "orders") == {0: 5}  # the log, not the checkpoint
        ms.commit_offsets("billing", "orders", {0: 6})
    with open_store(tmp_path, clock, commitlog_file_size_bytes=1 << 20) as ms:
        assert ms.committed_offsets("billing", "orders") == {0: 6}


def test_retention_keeps_a_live_groups_offsets_in_the_log(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 2)
        ms.commit_offsets("idle", "orders", {0: 3, 1: 4})  # never commits again
        ms.commit_offsets("busy", "orders", {0: 1})
        (first_at, _), _ = offset_records(ms)
        ms.put_messages([Message(topic="orders", body=b"x" * 900, queue_id=0) for _ in range(300)])
        ms.commit_offsets("busy", "orders", {0: 300})  # its newest record is in the last file
        later = int(time.time() * 1000) + 7 * DAY_MS  # files age by their real mtime
        assert ms.run_retention(now_ms=later, force=True) >= 3
        assert ms.stats().commitlog_min_offset > first_at  # the first commits' file is gone
        kept = offset_records(ms)
        rewritten = [c for _, c in kept if c.group == "idle"]
        assert [c.offsets for c in rewritten] == [{0: 3, 1: 4}]
        assert [c.group for _, c in kept].count("busy") == 1
    (tmp_path / "config" / "consumerOffset.json").unlink()  # the log alone must do
    with open_store(tmp_path, clock) as ms:
        assert ms.committed_offsets("idle", "orders") == {0: 3, 1: 4}
        assert ms.committed_offsets("busy", "orders") == {0: 300}


def test_the_checkpoint_is_rocketmqs_file_with_its_commitlog_offset(
    tmp_path: Path, clock: ManualClock
) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 1)
        ms.commit_offsets("billing", "orders", {0: 12})
        end = ms.stats().commitlog_max_offset
    document = checkpoint(tmp_path)
    assert document["offsetTable"] == {"orders@billing": {"0": 12}}
    assert document["commitLogOffset"] == end


def test_offsets_of_a_file_from_before_the_log_records_are_written_into_the_log(
    tmp_path: Path, clock: ManualClock
) -> None:
    with open_store(tmp_path, clock) as ms:
        ms.create_topic("orders", 2)
    legacy = {"offsetTable": {"orders@billing": {"0": 12, "1": 7}}, "dataVersion": {"counter": 3}}
    (tmp_path / "config" / "consumerOffset.json").write_text(json.dumps(legacy))
    with open_store(tmp_path, clock) as ms:
        assert ms.committed_offsets("billing", "orders") == {0: 12, 1: 7}
        ms.flush()  # the first persist writes them as records
        assert [c.offsets for _, c in offset_records(ms)] == [{0: 12, 1: 7}]
    (tmp_path / "config" / "consumerOffset.json").unlink()
    with open_store(tmp_path, clock) as ms:
        assert ms.committed_offsets("billing", "orders") == {0: 12, 1: 7}
        ms.flush()
        assert len(offset_records(ms)) == 1  # once


def test_an_older_file_stays_one_until_its_offsets_are_in_the_log(tmp_path: Path, clock: ManualClock) -> None:
    with open_store(tmp_path, clock, replicated=True) as ms:  # a replica with no role: may not write
        ms.create_topic("orders", 1)
    legacy = {"offsetTable": {"orders@billing": {"0": 12}}}
    (tmp_path / "config" / "consumerOffset.json").write_text(json.dumps(legacy))
    with open_store(tmp_path, clock, replicated=True) as ms:
        ms.flush()
        assert offset_records(ms) == []
    assert "commitLogOffset" not in checkpoint(tmp_path)  # so the next master still writes them
    with open_store(tmp_path, clock) as ms:
        ms.flush()
        assert [c.offsets for _, c in offset_records(ms)] == [{0: 12}]
    assert "commitLogOffset" in checkpoint(tmp_path)
