"""Relocation of parked messages: the delivered record is RocketMQ's, byte for byte, and a
relocation batch is published exactly once across replays and torn publishes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from store import Message, MessageStore, NotMaster, NotRelocatable, Relocation, RelocationKind, StoreConfig
from store.format.record import BODY_POS, RECORD_HEADER
from store.format.record_check import check_record
from store.publish.relocations import DECISION_SUFFIX, RELOCATION_SCHEMA, RelocationLog
from store.write.relocate import relocated_record


def open_store(tmp_path: Path) -> MessageStore:
    return MessageStore.open(
        StoreConfig(store_dir=tmp_path / "store", commitlog_file_size_bytes=1 << 22, auto_create_topics=True)
    )


def _fields(raw: bytes) -> dict[str, object]:
    check = check_record(raw, 0, check_crc=True)
    assert check.header is not None and check.properties is not None
    h = check.header
    return {
        "topic": check.topic,
        "body": raw[BODY_POS : BODY_POS + h.body_len],
        "flag": h.flag,
        "sys_flag": h.sys_flag,
        "born": (h.born_timestamp, h.born_ip, h.born_port),
        "store_host": (h.store_ip, h.store_port),
        "reconsume": h.reconsume_times,
        "prepared": h.prepared_tx_offset,
        "queue_id": h.queue_id,
        "props_raw": raw[RECORD_HEADER.size + h.body_len :],
        "properties": check.properties,
    }


def test_delivered_level_record_is_rocketmqs(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        ms.create_topic("orders", 4)
        parked = ms.put_message(
            Message(
                topic="orders",
                body=b"x" * 5000,  # compressed when stored: must stay compressed
                tags="paid",
                keys=("k1",),
                properties={"a": "1"},
                queue_id=2,
                flag=7,
                delay_level=3,
                reconsume_times=2,
                born_host=("10.1.2.3", 4567),
            )
        )
        assert parked.topic == "SCHEDULE_TOPIC_XXXX" and parked.queue_id == 2
        before = ms.read_record(parked.commitlog_offset)
        assert before is not None
        (delivered,) = ms.relocate([Relocation(parked.commitlog_offset)])
        assert delivered is not None
        after = ms.read_record(delivered.commitlog_offset)
        assert after is not None
        src, dst = _fields(before), _fields(after)
        assert dst["topic"] == "orders" and dst["queue_id"] == 2
        for same in ("body", "flag", "sys_flag", "born", "store_host", "reconsume", "properties"):
            assert dst[same] == src[same], same
        assert dst["prepared"] == 0
        props = dst["properties"]
        assert isinstance(props, dict)
        # RocketMQ builds the properties string before clearing DELAY/REAL_*: they stay.
        assert props["DELAY"] == "3" and props["REAL_TOPIC"] == "orders" and props["REAL_QID"] == "2"
        assert delivered.uniq_key == parked.uniq_key == props["UNIQ_KEY"]
        assert delivered.msg_id != parked.msg_id
        view = ms.get_messages("orders", 2, 0, 10).messages
        assert [m.body for m in view] == [b"x" * 5000]
        assert [m.tags for m in view] == ["paid"]


def test_relocating_a_normal_record_is_refused(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        r = ms.put_message(Message(topic="t", body=b"b"))
        with pytest.raises(NotRelocatable):
            ms.relocate([Relocation(r.commitlog_offset)])
        assert ms.max_offset("t", r.queue_id) == 1


def test_delayed_half_message_is_dropped_as_rocketmq_does(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        parked = ms.put_message(Message(topic="t", body=b"b", delay_level=1))
        raw = ms.read_record(parked.commitlog_offset)
        assert raw is not None
        check = check_record(raw, 0, check_crc=False)
        assert check.properties is not None
        props = dict(check.properties, REAL_TOPIC="RMQ_SYS_TRANS_HALF_TOPIC")
        from store.format.record import RecordFields, encode_record

        assert check.header is not None
        rebuilt = encode_record(
            RecordFields(topic="SCHEDULE_TOPIC_XXXX", body=b"b", properties=props, queue_id=0)
        )
        assert relocated_record(rebuilt, RelocationKind.DELIVER, enqueue_ms=0, dequeue_ms=0) is None


def _table(offsets: list[int]) -> pa.Table:
    n = len(offsets)
    return pa.table(
        {"commitlog_offset": offsets, "kind": [0] * n, "enqueue_ms": [0] * n, "dequeue_ms": [0] * n},
        schema=RELOCATION_SCHEMA,
    )


def test_relocation_batch_is_published_once_across_replays(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        parked = [
            ms.put_message(Message(topic="t", body=b"m%d" % i, delay_level=1, queue_id=0)) for i in range(5)
        ]
        log = RelocationLog(ms, chunk_rows=2)
        offsets = [p.commitlog_offset for p in parked]
        first = log.commit("delay", 0, _table(offsets[:3]))
        assert first.decided_now and first.appended == 3
        replay = log.commit("delay", 0, _table(offsets))  # a replay with other rows: no effect
        assert replay.already_published and replay.appended == 0
        log.commit("delay", 1, _table(offsets[3:]))
        bodies = [m.body for m in ms.get_messages("t", 0, 0, 100).messages]
        assert bodies == [b"m0", b"m1", b"m2", b"m3", b"m4"]


def test_a_store_that_is_not_master_decides_nothing(tmp_path: Path) -> None:
    """A batch POSTed to a replica without the master role (a job its previous life left running,
    before its supervisor stopped it) is refused before any decision is written."""
    with open_store(tmp_path) as ms:
        parked = [ms.put_message(Message(topic="t", body=b"m", delay_level=1, queue_id=0)) for _ in range(2)]
    replica = StoreConfig(store_dir=tmp_path / "store", commitlog_file_size_bytes=1 << 22, replicated=True)
    with MessageStore.open(replica) as ms:
        with pytest.raises(NotMaster, match="no role yet"):
            RelocationLog(ms, chunk_rows=2).commit("delay", 0, _table([p.commitlog_offset for p in parked]))
        assert not [p for p in (tmp_path / "store").rglob("*") if p.name.endswith(DECISION_SUFFIX)]
        assert ms.get_messages("t", 0, 0, 10).messages == []


def test_torn_publish_resumes_without_duplicates(tmp_path: Path) -> None:
    """A decision whose publish stopped after some chunks (broker killed) resumes at the gap."""
    with open_store(tmp_path) as ms:
        parked = [
            ms.put_message(Message(topic="t", body=b"m%d" % i, delay_level=1, queue_id=0)) for i in range(7)
        ]
        offsets = [p.commitlog_offset for p in parked]
        log = RelocationLog(ms, chunk_rows=3)
        # What a crash leaves: the decision written, then the first chunk appended.
        from store.publish.relocations import _create_exclusive

        path = log.root / "delay" / f"{0:020d}.arrow"
        assert _create_exclusive(path, _table(offsets), ms.commitlog_max_offset)
        ms.put_message(Message(topic="other", body=b"traffic meanwhile"))
        ms.relocate([Relocation(o) for o in offsets[:3]])
        (outcome,) = log.recover()
        assert outcome.appended == 4 and not outcome.decided_now
        assert log.last_published("delay") == 0 and not path.exists()
        bodies = [m.body for m in ms.get_messages("t", 0, 0, 100).messages]
        assert bodies == [b"m%d" % i for i in range(7)]
        again = log.commit("delay", 0, _table(offsets))
        assert again.already_published


def test_a_new_master_does_not_relocate_again_what_an_earlier_one_did(tmp_path: Path) -> None:
    """After a failover the new master's operator job starts over (its checkpoint and the old
    master's decisions were not replicated). Records parked before its leadership began and
    already found in their topic (same UNIQ_KEY, stored after them) are skipped; the rest go."""
    import shutil

    with open_store(tmp_path) as ms:
        parked = [
            ms.put_message(Message(topic="t", body=b"m%d" % i, delay_level=1, queue_id=0)) for i in range(4)
        ]
        offsets = [p.commitlog_offset for p in parked]
        earlier = RelocationLog(ms, chunk_rows=2)
        assert earlier.commit("delay", 0, _table(offsets[:2])).appended == 2  # the old master's job
        leadership = ms.commitlog_max_offset
        shutil.rmtree(earlier.root)  # its decisions stayed on the old master's disk
        later = RelocationLog(ms, chunk_rows=2)
        later.inherited_before = lambda: leadership
        outcome = later.commit("delay", 0, _table(offsets))  # the new job decides everything again
        assert outcome.appended == 2 and later.skipped_inherited == 2
        bodies = [m.body for m in ms.get_messages("t", 0, 0, 100).messages]
        assert bodies == [b"m0", b"m1", b"m2", b"m3"]
