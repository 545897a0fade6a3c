"""The offsetTable: RocketMQ's consumerOffset.json format both ways, commits, transaction
offsets, atomic writes, corrupt files."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.config import StoreConfig
from store.errors import CorruptStore, InvalidArgument, InvalidGroupName, InvalidTopicName
from store.metadata.offset_table import ConsumerOffsetTable, DelayOffsetTable, write_json_atomically


def clock() -> int:
    return 1_700_000_000_000


def test_file_format_is_rocketmq_consumer_offset(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    table = ConsumerOffsetTable(path, clock)
    table.commit("billing", "orders", 0, 12)
    table.commit("billing", "orders", 1, 7)
    table.commit("audit", "orders", 0, 3)
    assert table.persist()
    assert json.loads(path.read_text()) == {
        "offsetTable": {"orders@audit": {"0": 3}, "orders@billing": {"0": 12, "1": 7}},
        "dataVersion": {"counter": 1, "timestamp": 1_700_000_000_000},
    }


def test_transaction_offsets_move_with_their_watermark_in_one_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    table = ConsumerOffsetTable(path, clock)
    assert table.transaction_offsets_applied == 0
    assert table.apply_transaction(0, "ctp", {"in": {0: 5, 1: 2}})
    table.commit("ctp", "in", 1, 9)  # a plain commit after the transaction's: it wins
    assert table.apply_transaction(3, "ctp", {"in": {0: 8}})
    assert not table.apply_transaction(2, "ctp", {"in": {0: 1}})  # below the watermark: applied before
    assert not table.apply_transaction(3, "ctp", {"in": {0: 1}})
    assert table.offsets("ctp", "in") == {0: 8, 1: 9}
    table.persist()
    document = json.loads(path.read_text())
    assert document["transactionOffsetsApplied"] == 4
    assert document["offsetTable"] == {"in@ctp": {"0": 8, "1": 9}}
    reopened = ConsumerOffsetTable(path, clock)
    assert reopened.transaction_offsets_applied == 4 and reopened.offsets("ctp", "in") == {0: 8, 1: 9}


def test_reads_a_rocketmq_written_file(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    path.write_text(
        '{"offsetTable":{"TopicTest@please_rename_unique_group_name_4":{"0":250,"1":249}},'
        '"dataVersion":{"counter":41,"timestamp":1699999999999,"stateVersion":0}}'
    )
    table = ConsumerOffsetTable(path)
    assert table.offsets("please_rename_unique_group_name_4", "TopicTest") == {0: 250, 1: 249}
    assert not table.dirty
    table.commit("please_rename_unique_group_name_4", "TopicTest", 0, 251)
    table.persist()
    assert json.loads(path.read_text())["dataVersion"]["counter"] == 42


def test_commit_query_delete(tmp_path: Path) -> None:
    table = ConsumerOffsetTable(tmp_path / "o.json")
    assert table.query("g", "t", 0) == -1
    table.commit_many("g", "t", {0: 5, 1: 6})
    table.commit("g", "u", 2, 9)
    table.commit("h", "t", 0, 1)
    table.commit("g", "%RETRY%g", 0, 1)
    assert table.query("g", "t", 1) == 6
    assert table.offsets("g", "t") == {0: 5, 1: 6}
    assert table.groups() == {"g": ["%RETRY%g", "t", "u"], "h": ["t"]}
    assert table.delete("g", "u") == 1
    assert table.delete_topic("t") == 2
    assert table.groups() == {"g": ["%RETRY%g"]}
    assert table.delete("g") == 1
    assert table.delete("nobody") == 0
    assert table.groups() == {}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("g/x", "t", 0, 0), InvalidGroupName),
        (("g", "a b", 0, 0), InvalidTopicName),
        (("g", "t", -1, 0), InvalidArgument),
        (("g", "t", 0, -5), InvalidArgument),
    ],
)
def test_commit_refuses_bad_input(
    tmp_path: Path, args: tuple[str, str, int, int], error: type[Exception]
) -> None:
    table = ConsumerOffsetTable(tmp_path / "o.json")
    with pytest.raises(error):
        table.commit(*args)
    assert not table.dirty


def test_dirty_flag_makes_periodic_persist_cheap(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    table = ConsumerOffsetTable(path)
    assert not table.persist()
    assert not path.exists()
    table.commit("g", "t", 0, 1)
    assert table.dirty
    assert table.persist()
    assert not table.dirty
    stamp = path.stat().st_mtime_ns
    assert not table.persist()
    assert path.stat().st_mtime_ns == stamp
    assert table.persist(force=True)


def test_atomic_write_keeps_old_content_when_replace_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "o.json"
    table = ConsumerOffsetTable(path)
    table.commit("g", "t", 0, 1)
    table.persist()
    before = path.read_bytes()
    table.commit("g", "t", 0, 2)

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk on fire"):
        table.persist()
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert table.dirty  # still owed to disk
    assert ConsumerOffsetTable(path).query("g", "t", 0) == 1  # a leftover .tmp is ignored
    assert table.persist()
    assert ConsumerOffsetTable(path).query("g", "t", 0) == 2


def test_corrupt_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    path.write_text('{"offsetTable": {"no-separator": {"0": 1}}}')
    with pytest.raises(CorruptStore, match="no-separator"):
        ConsumerOffsetTable(path)
    path.write_text("{truncated")
    with pytest.raises(CorruptStore, match="not valid JSON"):
        ConsumerOffsetTable(path)


def test_concurrent_commits_and_persists(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    table = ConsumerOffsetTable(path)

    def worker(queue_id: int) -> None:
        for offset in range(200):
            table.commit("g", "t", queue_id, offset)
            if offset % 50 == 0:
                table.persist()

    threads = [threading.Thread(target=worker, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table.persist()
    assert ConsumerOffsetTable(path).offsets("g", "t") == dict.fromkeys(range(4), 199)


offsets_strategy = st.dictionaries(
    st.tuples(st.sampled_from(["g1", "g2", "CID_x"]), st.sampled_from(["t", "u", "%RETRY%g1"])),
    st.dictionaries(st.integers(0, 64), st.integers(0, 2**62), min_size=1, max_size=4),
    max_size=6,
)


@settings(max_examples=30, deadline=None)
@given(offsets_strategy)
def test_persist_reload_round_trip(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict[tuple[str, str], dict[int, int]]
) -> None:
    path = tmp_path_factory.mktemp("off") / "consumerOffset.json"
    table = ConsumerOffsetTable(path)
    for (group, topic), queues in offsets.items():
        table.commit_many(group, topic, queues)
    table.persist(force=True)
    reloaded = ConsumerOffsetTable(path)
    for (group, topic), queues in offsets.items():
        assert reloaded.offsets(group, topic) == queues


def test_from_config_paths(tmp_path: Path) -> None:
    config = StoreConfig(store_dir=tmp_path).validate()
    table = ConsumerOffsetTable.from_config(config)
    table.commit("g", "t", 0, 1)
    table.persist()
    assert (tmp_path / "config" / "consumerOffset.json").exists()
    delay = DelayOffsetTable.from_config(config)
    delay.set(1, 3)
    delay.persist()
    assert (tmp_path / "config" / "delayOffset.json").exists()


def test_delay_offsets(tmp_path: Path) -> None:
    path = tmp_path / "delayOffset.json"
    table = DelayOffsetTable(path, clock)
    assert table.get(3) == 0
    table.set(1, 0)
    table.set(3, 17)
    assert table.persist()
    assert json.loads(path.read_text())["offsetTable"] == {"1": 0, "3": 17}
    table.set(3, 17)
    assert not table.dirty  # unchanged value: nothing to write
    reloaded = DelayOffsetTable(path)
    assert reloaded.levels() == {1: 0, 3: 17}
    with pytest.raises(InvalidArgument):
        table.set(0, 1)


def test_write_json_atomically_creates_parent(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b.json"
    write_json_atomically(target, {"x": 1})
    assert json.loads(target.read_text()) == {"x": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.json"]
