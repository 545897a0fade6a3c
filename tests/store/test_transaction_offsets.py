"""Columnar halves (``put_halves``) and offsets committed by transactions: the records byte for
byte, applied in the commit's step and never on rollback, re-applied after a crash, a torn
commit completed; and the ordering rule against plain commits (docs/transactions.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from store import BatchPutResult, MessageStore, ProduceColumns, ProducerRef, StoreConfig
from store.errors import FlushSlaveTimeout, SlaveNotAvailable
from store.format.record import encode_record
from store.format.record_check import check_record
from store.names import TRANS_HALF_TOPIC, TRANS_OFFSETS_TOPIC, TRANS_OP_HALF_TOPIC
from store.publish.transactions import TransactionService
from store.write.transactions import (
    Half,
    HalfOf,
    TxOffsets,
    TxOutcome,
    final_record,
    offsets_half_record,
    parse_offsets_body,
)

NOW = 1_700_000_000_000
TX = HalfOf("kafka:app", "kafka-7-0-1", 70)

#: A half stored by ``put_halves`` (the Kafka door's Produce): RMQ_SYS_TRANS_HALF_TOPIC queue 0,
#: sysflag 0, the message's properties (header h=v, UNIQ_KEY from the ProducerRef, KEYS) then
#: REAL_TOPIC=orders, REAL_QID=2, TRAN_MSG=true, __transactionId__, PGROUP and
#: CHECK_IMMUNITY_TIME_IN_SECONDS=70 — what ``put_messages`` writes for a prepared message.
GOLDEN_COLUMNAR_HALF_HEX = (
    "0000012a"
    "daa320a7"
    "4a37a706"
    "00000000"
    "00000000"  # size, magic, body CRC, queue 0, flag
    "0000000000000000"
    "0000000000000000"
    "00000000"  # queue offset, physical offset, sysflag NOT_TYPE
    "0000018bcfe567fb"
    "7f000001"
    "00000000"  # born = the record's CreateTime (NOW - 5), born host
    "0000018bcfe56800"
    "7f000001"
    "00002a9f"  # store timestamp, store host
    "00000000"
    "0000000000000000"
    "00000003"
    "6b2d31"  # body "k-1"
    "18"
    "524d515f5359535f5452414e535f48414c465f544f504943"  # RMQ_SYS_TRANS_HALF_TOPIC
    "00b4"
    "68017602"  # h=v
    "554e49515f4b4559014546353046433738314341373544383946364645353031383030303030303030"
    "02"  # UNIQ_KEY
    "4b455953016b65793102"  # KEYS=key1
    "5245414c5f544f504943016f726465727302"  # REAL_TOPIC=orders
    "5245414c5f514944013202"  # REAL_QID=2
    "5452414e5f4d5347017472756502"  # TRAN_MSG=true
    "5f5f7472616e73616374696f6e49645f5f016b61666b612d372d302d3102"  # __transactionId__
    "5047524f5550016b61666b613a61707002"  # PGROUP=kafka:app
    "434845434b5f494d4d554e4954595f54494d455f494e5f5345434f4e445301373002"  # immunity 70 s
)
OFFSETS_PROPS_HEX = (
    "554e49515f4b4559014f4646534554533030303030303030303030303030303030303030303030303102"
    "5245414c5f544f50494301726d715f7379735f7472616e735f6f666673657473"  # REAL_TOPIC=rmq_sys_...
    "025245414c5f514944013002"  # REAL_QID=0
    "5452414e5f4d5347017472756502"
    "5f5f7472616e73616374696f6e49645f5f016b61666b612d372d302d3102"
    "5047524f5550016b61666b613a61707002"
    "434845434b5f494d4d554e4954595f54494d455f494e5f5345434f4e445301373002"
)
#: The offsets half (Kafka's TxnOffsetCommit): body = compact JSON of group and offsets.
GOLDEN_OFFSETS_HALF_HEX = (
    "00000157"
    "daa320a7"
    "3a9df5d5"
    "00000000"
    "00000000"
    "0000000000000000"
    "0000000000000000"
    "00000000"
    "0000018bcfe56800"
    "7f000001"
    "00002a9f"  # born: the broker
    "0000000000000000"
    "7f000001"
    "00002a9f"
    "00000000"
    "0000000000000000"
    "0000002f"
    "7b2267726f7570223a22617070222c226f666673657473223a7b22696e223a7b2230223a31322c2231223a357d7d7d"
    "18"
    "524d515f5359535f5452414e535f48414c465f544f504943"
    "00b5" + OFFSETS_PROPS_HEX
)
#: Its final record at commit, half at CommitLog offset 0x40: rmq_sys_trans_offsets queue 0,
#: sysflag COMMIT, preparedTransactionOffset 0x40, properties copied whole.
GOLDEN_OFFSETS_FINAL_HEX = (
    "00000154"
    "daa320a7"
    "3a9df5d5"
    "00000000"
    "00000000"
    "0000000000000000"
    "0000000000000000"
    "00000008"
    "0000018bcfe56800"
    "7f000001"
    "00002a9f"
    "0000000000000000"
    "7f000001"
    "00002a9f"
    "00000000"
    "0000000000000040"
    "0000002f"
    "7b2267726f7570223a22617070222c226f666673657473223a7b22696e223a7b2230223a31322c2231223a357d7d7d"
    "15"
    "726d715f7379735f7472616e735f6f666673657473"  # rmq_sys_trans_offsets
    "00b5" + OFFSETS_PROPS_HEX
)


def open_store(path: Path) -> MessageStore:
    config = StoreConfig(store_dir=path, commitlog_file_size_bytes=1 << 22, background_services=False)
    return MessageStore.open(config, clock_ms=lambda: NOW)


def test_golden_columnar_half_offsets_half_and_final(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        columns = ProduceColumns(
            bodies=[b"k-1"],
            queue_ids=np.array([2], dtype=np.int32),
            keys=["key1"],
            properties={"h": ["v"]},
            born_timestamps_ms=[NOW - 5],
        )
        result = ms.put_halves(
            "orders", columns, transaction=TX, producer=ProducerRef("kafka:7:0:2:orders", 0)
        )
        assert isinstance(result, BatchPutResult)
        assert result.topic == TRANS_HALF_TOPIC and result.queue_ids.tolist() == [0]
        raw = ms.read_record(int(result.commitlog_offsets[0]))
    assert raw is not None and raw.hex() == GOLDEN_COLUMNAR_HALF_HEX
    entry = TxOffsets("app", {"in": {1: 5, 0: 12}})
    half = offsets_half_record(
        entry,
        half=TX,
        uniq_key="OFFSETS0000000000000000000000001",
        born_ms=NOW,
        store_host=("127.0.0.1", 10911),
    )
    assert encode_record(half).hex() == GOLDEN_OFFSETS_HALF_HEX
    assert encode_record(final_record(Half(encode_record(half), 0x40))).hex() == GOLDEN_OFFSETS_FINAL_HEX
    assert parse_offsets_body(half.body) == entry


def halves(ms: MessageStore, tx: HalfOf, values: list[bytes], queue_id: int) -> BatchPutResult:
    columns = ProduceColumns(bodies=values, queue_ids=np.full(len(values), queue_id, dtype=np.int32))
    result = ms.put_halves("out", columns, transaction=tx)
    assert isinstance(result, BatchPutResult)
    return result


def put_kafka_halves(ms: MessageStore, service: TransactionService, tx: HalfOf, values: list[bytes]) -> None:
    service.register_batch(tx, halves(ms, tx, values, 1), "out", 1)


def test_commit_applies_offsets_in_its_step_and_rollback_never(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("in", 2)
        ms.create_topic("out", 2)
        service = TransactionService.open(ms)
        committed, rolled = HalfOf("kafka:app", "kafka-7-0-1"), HalfOf("kafka:app", "kafka-7-0-2")
        put_kafka_halves(ms, service, committed, [b"a", b"b"])
        service.put_offsets(committed, TxOffsets("ctp", {"in": {0: 2}}))
        put_kafka_halves(ms, service, rolled, [b"c"])
        service.put_offsets(rolled, TxOffsets("ctp", {"in": {0: 3}}))
        assert ms.committed_offsets("ctp", "in") == {}  # nothing before the commit

        ended = service.end(committed.transaction_id, TxOutcome.COMMIT, "kafka:app")
        assert [r.topic for r in ended.transaction.results] == ["out", "out"]
        assert ms.committed_offsets("ctp", "in") == {0: 2}
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b"]
        service.end(rolled.transaction_id, TxOutcome.ROLLBACK, "kafka:app")
        assert ms.committed_offsets("ctp", "in") == {0: 2}
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b"]
        (offsets_final,) = ms.get_messages(TRANS_OFFSETS_TOPIC, 0, 0, 10).messages
        final = check_record(ms.read_record(offsets_final.commitlog_offset) or b"", 0, check_crc=True)
        assert final.header is not None and final.header.sys_flag & 0xC == 8
        assert ms.transaction_offsets_applied == 1
        assert service.transactions("kafka:app")[0].topics == ["out"]  # offsets are not a topic


def test_after_a_crash_the_table_is_the_log_in_order_transactions_and_plain_commits_alike(
    tmp_path: Path,
) -> None:
    """Both kinds of offset records are applied when dispatched, in log order, so the table a
    crash leaves behind is rebuilt exactly: the second transaction's offsets, then the plain
    commit after it (nothing for the transaction service to re-apply any more)."""
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("in", 2)
        ms.create_topic("out", 1)
        service = TransactionService.open(ms)
        first, second = HalfOf("kafka:app", "kafka-7-0-1"), HalfOf("kafka:app", "kafka-7-0-2")
        for tx, offset in ((first, 5), (second, 9)):
            service.register_batch(tx, halves(ms, tx, [b"x"], 0), "out", 0)
            service.put_offsets(tx, TxOffsets("ctp", {"in": {0: offset, 1: offset}}))
        service.end(first.transaction_id, TxOutcome.COMMIT, None)
        ms.commit_offsets("ctp", "in", {1: 100})  # a plain commit after the first transaction's
        ms.flush()  # the table is checkpointed here: the first transaction is in the snapshot
        service.end(second.transaction_id, TxOutcome.COMMIT, None)
        ms.commit_offsets("ctp", "in", {1: 200})  # after the second, not in the checkpoint
        assert ms.committed_offsets("ctp", "in") == {0: 9, 1: 200}
        ms.abandon()  # kill -9: the table on disk predates the second commit
    with open_store(tmp_path / "s") as ms:
        assert ms.committed_offsets("ctp", "in") == {0: 9, 1: 200}
        assert TransactionService.open(ms).reapplied_offsets == 0
        assert ms.committed_offsets("ctp", "in") == {0: 9, 1: 200}
        ms.flush()
    with open_store(tmp_path / "s") as ms:
        assert TransactionService.open(ms).reapplied_offsets == 0
        assert ms.committed_offsets("ctp", "in") == {0: 9, 1: 200}


def test_a_commit_torn_after_some_finals_is_completed_with_its_offsets(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("in", 1)
        ms.create_topic("out", 2)
        service = TransactionService.open(ms)
        put_kafka_halves(ms, service, TX, [b"a", b"b", b"c"])
        service.put_offsets(TX, TxOffsets("ctp", {"in": {0: 3}}))
        halves = ms.get_messages(TRANS_HALF_TOPIC, 0, 0, 10).messages
        first = halves[0]
        # The commit's append reached the disk up to its first final message only.
        ms.append_records(
            [final_record(Half(ms.read_record(first.commitlog_offset) or b"", first.commitlog_offset))]
        )
        ms.abandon()
    with open_store(tmp_path / "s") as ms:
        service = TransactionService.open(ms)
        assert service.repaired == 1
        tx = service.get(TX.transaction_id)
        assert tx is not None and tx.outcome is TxOutcome.COMMIT
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b", b"c"]
        assert ms.committed_offsets("ctp", "in") == {0: 3}
        assert ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 5).messages[0].body == b"0,1,2,3,"
        assert not service.end(TX.transaction_id, TxOutcome.COMMIT, None).ended_now
    with open_store(tmp_path / "s") as ms:
        service = TransactionService.open(ms)
        assert service.repaired == 0
        assert len(ms.get_messages("out", 1, 0, 10).messages) == 3


def _timed_out(end_offset: int) -> Exception:
    return FlushSlaveTimeout("the in-sync replicas did not hold it in time", end_offset=end_offset)


def _refuse_the_next_acknowledgement(
    ms: MessageStore, monkeypatch: pytest.MonkeyPatch, refusal: Callable[[int], Exception]
) -> None:
    """The store's next write is stored and then refused by ``refusal(end offset)``, as a
    replica group refuses a write its in-sync replicas did not acknowledge; later ones pass."""
    appender = ms._appender
    acknowledge = appender._acknowledge
    refused: list[int] = []

    def not_acknowledged_once(end_offset: int) -> None:
        if not refused:
            refused.append(end_offset)
            raise refusal(end_offset)
        acknowledge(end_offset)

    monkeypatch.setattr(appender, "_acknowledge", not_acknowledged_once)


@pytest.mark.parametrize(
    "refusal",
    [
        _timed_out,
        lambda end: SlaveNotAvailable("the in-sync set fell below 2 after the append", appended=True),
    ],
    ids=["flush_slave_timeout", "in_sync_set_shrank"],
)
def test_an_end_stored_but_not_acknowledged_is_not_appended_again_by_its_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: Callable[[int], Exception]
) -> None:
    """A commit's append stored on the master but not acknowledged (a replica group) raises; the
    Kafka coordinator then answers COORDINATOR_NOT_AVAILABLE and the client retries the commit.
    The retry must complete the stored end (its op, its offsets), not append the final messages
    a second time: the Jepsen run's transaction loop read a batch twice that way."""
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("in", 2)
        ms.create_topic("out", 2)
        service = TransactionService.open(ms)
        tx = HalfOf("kafka:app", "kafka-7-0-1")
        put_kafka_halves(ms, service, tx, [b"a", b"b"])
        service.put_offsets(tx, TxOffsets("ctp", {"in": {0: 2}}))

        _refuse_the_next_acknowledgement(ms, monkeypatch, refusal)
        with pytest.raises((FlushSlaveTimeout, SlaveNotAvailable)):
            service.end(tx.transaction_id, TxOutcome.COMMIT, "kafka:app")
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b"]  # stored

        retried = service.end(tx.transaction_id, TxOutcome.COMMIT, "kafka:app")
        assert retried.outcome is TxOutcome.COMMIT
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b"]  # once
        assert ms.committed_offsets("ctp", "in") == {0: 2}
        assert service.pending() == []
        assert not service.end(tx.transaction_id, TxOutcome.COMMIT, "kafka:app").ended_now

    with open_store(tmp_path / "s") as ms:  # and the log, read again, agrees
        service = TransactionService.open(ms)
        assert service.pending() == [] and service.repaired == 0
        assert [m.body for m in ms.get_messages("out", 1, 0, 10).messages] == [b"a", b"b"]
        assert ms.committed_offsets("ctp", "in") == {0: 2}


def test_an_offsets_half_stored_but_not_acknowledged_joins_its_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TxnOffsetCommit's half stored but not acknowledged raises, and its client sends the
    offsets again (a new half). The first one is still a half of the transaction: the commit's
    op names both, so reading the log again finds nothing open that a repair could apply after
    newer offsets (it found the stray half open before)."""
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("in", 2)
        ms.create_topic("out", 2)
        service = TransactionService.open(ms)
        tx = HalfOf("kafka:app", "kafka-7-0-2")
        put_kafka_halves(ms, service, tx, [b"a"])
        _refuse_the_next_acknowledgement(ms, monkeypatch, _timed_out)
        with pytest.raises(FlushSlaveTimeout):
            service.put_offsets(tx, TxOffsets("ctp", {"in": {0: 1}}))
        service.put_offsets(tx, TxOffsets("ctp", {"in": {0: 1}}))  # the client's retry
        (pending,) = service.pending()
        assert sum(len(run) for run in pending.runs) == 3, "the stored offsets half is in the table"
        assert service.end(tx.transaction_id, TxOutcome.COMMIT, "kafka:app").ended_now
        assert ms.committed_offsets("ctp", "in") == {0: 1}
    with open_store(tmp_path / "s") as ms:
        service = TransactionService.open(ms)
        assert service.pending() == [] and service.repaired == 0
        assert ms.committed_offsets("ctp", "in") == {0: 1}
