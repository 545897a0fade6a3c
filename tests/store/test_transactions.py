"""Transactions in the store: the half, final, op and discard records byte for byte; an end that
is atomic and idempotent; the table rebuilt from the log; the op repaired after a torn end."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import Message, MessageStore, NotMaster, SlaveNotAvailable, StoreConfig
from store.format.record import encode_record
from store.format.record_check import check_record
from store.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from store.publish.transactions import ProducerGroupMismatch, TransactionService, UnknownTransaction
from store.write.transactions import Half, TxOutcome, discard_record, final_record, op_record, parse_op_body

NOW = 1_700_000_000_000


def open_store(path: Path) -> MessageStore:
    config = StoreConfig(store_dir=path, commitlog_file_size_bytes=1 << 22, background_services=False)
    return MessageStore.open(config, clock_ms=lambda: NOW)


def open_replicated(path: Path) -> MessageStore:
    """The store as a replica-group member opens it (no role: it takes no write yet)."""
    config = StoreConfig(
        store_dir=path, commitlog_file_size_bytes=1 << 22, background_services=False, replicated=True
    )
    return MessageStore.open(config, clock_ms=lambda: NOW)


def _torn_commit(path: Path, finals: int) -> str:
    """A two-half transaction whose commit reached the disk up to ``finals`` final messages, not
    its op (then a kill -9); returns its id."""
    with open_store(path) as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders", "orders"])
        halves = zip(
            records(ms, TRANS_HALF_TOPIC), ms.get_messages(TRANS_HALF_TOPIC, 0, 0, 10).messages, strict=True
        )
        ms.append_records([final_record(Half(raw, m.commitlog_offset)) for raw, m in halves][:finals])
        ms.abandon()
    return txid


def put_halves(ms: MessageStore, service: TransactionService, topics: list[str], group: str = "pg") -> str:
    first = ms.commitlog_max_offset
    keys = [f"UNIQ{first:012d}{i:016d}" for i in range(len(topics))]
    txid = keys[0]
    results = ms.put_messages(
        [
            Message(
                topic=t,
                body=f"m{i}".encode(),
                tags="t",
                queue_id=1,
                properties={"PGROUP": group, "__transactionId__": txid, "u": "1"},
                transaction_prepared=True,
                uniq_key=keys[i],
                born_host=("10.0.0.1", 5000),
            )
            for i, t in enumerate(topics)
        ]
    )
    assert {r.topic for r in results} == {TRANS_HALF_TOPIC}
    service.register(txid, group, results, NOW)
    return txid


def records(ms: MessageStore, topic: str, queue_id: int = 0) -> list[bytes]:
    out = []
    for m in ms.get_messages(topic, queue_id, 0, 100).messages:
        raw = ms.read_record(m.commitlog_offset)
        assert raw is not None
        out.append(raw)
    return out


#: Properties string of the golden half (user properties first): PGROUP=pg,
#: __transactionId__=UNIQ0..0, u=1, UNIQ_KEY=UNIQ0..0, TAGS=t, REAL_TOPIC=orders, REAL_QID=1,
#: TRAN_MSG=true.
HALF_PROPS_HEX = (
    "5047524f5550017067025f5f7472616e73616374696f6e49645f5f01"
    "554e495130303030303030303030303030303030303030303030303030303030"
    "0275013102554e49515f4b455901"
    "554e495130303030303030303030303030303030303030303030303030303030"
    "02544147530174025245414c5f544f504943016f7264657273025245414c5f5149440131025452414e5f4d5347017472756502"
)
#: A half as the store writes it (RocketMQ ``parseHalfMessageInner``): RMQ_SYS_TRANS_HALF_TOPIC
#: queue 0, transaction bits reset to NOT_TYPE (sysflag 0), REAL_TOPIC/REAL_QID/TRAN_MSG added.
GOLDEN_HALF_HEX = (
    "00000112"
    "daa320a7"
    "375337b9"
    "00000000"
    "00000000"  # size, magic, body CRC, queue 0, flag
    "0000000000000000"
    "0000000000000000"
    "00000000"  # queue offset, physical offset, sysflag
    "0000018bcfe56800"
    "0a000001"
    "00001388"  # born timestamp, born host 10.0.0.1:5000
    "0000018bcfe56800"
    "7f000001"
    "00002a9f"  # store timestamp, store host
    "00000000"
    "0000000000000000"  # reconsume times, preparedTransactionOffset
    "00000002"
    "6d30"  # body "m0"
    "18"
    "524d515f5359535f5452414e535f48414c465f544f504943"  # RMQ_SYS_TRANS_HALF_TOPIC
    "009d" + HALF_PROPS_HEX
)
#: Its final message (``endMessageTransaction``), half at CommitLog offset 0x1234, before the
#: append patches the store timestamp: topic/queue from REAL_*, sysflag COMMIT (8),
#: preparedTransactionOffset 0x1234, the properties string copied whole.
GOLDEN_FINAL_HEX = (
    "00000100"
    "daa320a7"
    "375337b9"
    "00000001"
    "00000000"  # size, magic, body CRC, queue 1, flag
    "0000000000000000"
    "0000000000000000"
    "00000008"  # queue offset, physical offset, COMMIT
    "0000018bcfe56800"
    "0a000001"
    "00001388"  # born timestamp, born host
    "0000000000000000"
    "7f000001"
    "00002a9f"  # store timestamp (set at append), store host
    "00000000"
    "0000000000001234"  # reconsume times, preparedTransactionOffset = the half
    "00000002"
    "6d30"  # body "m0"
    "06"
    "6f7264657273"  # topic "orders"
    "009d" + HALF_PROPS_HEX
)
#: The op ("d") ending halves 0 and 7: RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, sysflag 0, body
#: "0,7,", TAGS=d, its own UNIQ_KEY; __transactionId__ and SPARKMQ_TX_END are sparkmq's.
GOLDEN_OP_HEX = (
    "000000f6"
    "daa320a7"
    "42e754ee"
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
    "00000004"
    "302c372c"  # body "0,7,"
    "1b"
    "524d515f5359535f5452414e535f4f505f48414c465f544f504943"  # RMQ_SYS_TRANS_OP_HALF_TOPIC
    "007c"
    "54414753016402"  # TAGS=d
    "554e49515f4b4559014f50554e495130303030303030303030303030303030303030303030303030303031"  # UNIQ_KEY
    "02"
    "5f5f7472616e73616374696f6e49645f5f01"  # __transactionId__=
    "554e49513030303030303030303030303030303030303030303030303030303002"
    "535041524b4d515f54585f454e4401636f6d6d697402"  # SPARKMQ_TX_END=commit
)
#: The half after its last check (``resolveDiscardMsg``): TRANS_CHECK_MAX_TIME_TOPIC queue 0,
#: the half's fields, TRANSACTION_CHECK_TIMES=15 appended to its properties.
GOLDEN_DISCARD_HEX = (
    "0000012f"
    "daa320a7"
    "375337b9"
    "00000000"
    "00000000"
    "0000000000000000"
    "0000000000000000"
    "00000000"
    "0000018bcfe56800"
    "0a000001"
    "00001388"
    "0000000000000000"
    "7f000001"
    "00002a9f"
    "00000000"
    "0000000000000000"
    "00000002"
    "6d30"
    "1a"
    "5452414e535f434845434b5f4d41585f54494d455f544f504943"  # TRANS_CHECK_MAX_TIME_TOPIC
    "00b8" + HALF_PROPS_HEX + "5452414e53414354494f4e5f434845434b5f54494d455301313502"
)


def test_golden_transaction_records(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        txid = put_halves(ms, TransactionService.open(ms), ["orders"])
        (raw,) = records(ms, TRANS_HALF_TOPIC)
    assert raw.hex() == GOLDEN_HALF_HEX
    half = Half(raw, 0x1234)
    assert encode_record(final_record(half)).hex() == GOLDEN_FINAL_HEX
    assert encode_record(discard_record(half, 15)).hex() == GOLDEN_DISCARD_HEX
    op = op_record(
        [0, 7],
        transaction_id=txid,
        outcome=TxOutcome.COMMIT,
        uniq_key="OPUNIQ0000000000000000000000000001",
        born_ms=NOW,
        store_host=("127.0.0.1", 10911),
    )
    assert encode_record(op).hex() == GOLDEN_OP_HEX
    assert parse_op_body(b"0,7,") == [0, 7] and parse_op_body(b"12,x,,3,") == [12, 3]


def test_commit_writes_rocketmqs_final_record_and_op_once(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders"])
        (half_raw,) = records(ms, TRANS_HALF_TOPIC)
        half = check_record(half_raw, 0, check_crc=True)
        assert half.header is not None and half.header.sys_flag & 0xC == 0  # RocketMQ resets to NOT_TYPE
        assert half.properties is not None and half.properties["REAL_TOPIC"] == "orders"
        assert half.properties["TRAN_MSG"] == "true" and half.properties["__transactionId__"] == txid

        ended = service.end(txid, TxOutcome.COMMIT, "pg")
        assert ended.ended_now and ended.outcome is TxOutcome.COMMIT
        (final_raw,) = records(ms, "orders", 1)
        final = check_record(final_raw, 0, check_crc=True)
        assert final.header is not None and half.header is not None
        assert final.header.sys_flag & 0xC == 8
        assert final.header.prepared_tx_offset == 0  # the half is the store's first record
        assert final.properties == half.properties  # copied whole
        assert final.header.born_timestamp == half.header.born_timestamp
        (op_raw,) = records(ms, TRANS_OP_HALF_TOPIC)
        op = check_record(op_raw, 0, check_crc=True)
        assert op.header is not None and op.header.sys_flag == 0 and op.header.queue_id == 0
        assert op.properties is not None and op.properties["TAGS"] == "d"
        assert op.properties["SPARKMQ_TX_END"] == "commit" and op.properties["__transactionId__"] == txid
        assert ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 1).messages[0].body == b"0,"

        again = service.end(txid, TxOutcome.ROLLBACK, "pg")  # a late answer: no-op, first outcome
        assert not again.ended_now and again.outcome is TxOutcome.COMMIT
        assert len(records(ms, "orders", 1)) == 1 and len(records(ms, TRANS_OP_HALF_TOPIC)) == 1


def test_a_retired_service_refuses_every_write_and_its_replacement_sees_the_log(tmp_path: Path) -> None:
    """A replica about to lead retires the table it built as a slave (broker.membership): until
    the rebuilt one replaces it, nothing registers or ends there (NotMaster, which the doors
    answer as retriable)."""
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders"])
        service.retire("becoming master")
        with pytest.raises(NotMaster, match="being rebuilt: becoming master"):
            service.end(txid, TxOutcome.COMMIT, "pg")
        with pytest.raises(NotMaster):
            put_halves(ms, service, ["orders"])  # stored, not registered: the retry registers it
        assert records(ms, "orders", 1) == [] and records(ms, TRANS_OP_HALF_TOPIC) == []
        rebuilt = TransactionService.open(ms)
        assert sorted(t.transaction_id for t in rebuilt.pending()) == sorted(
            m.properties["__transactionId__"] for m in ms.get_messages(TRANS_HALF_TOPIC, 0, 0, 10).messages
        )
        assert rebuilt.end(txid, TxOutcome.COMMIT, "pg").ended_now


def test_rollback_unknown_and_wrong_group(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders"])
        with pytest.raises(ProducerGroupMismatch):
            service.end(txid, TxOutcome.COMMIT, "other")
        with pytest.raises(UnknownTransaction):
            service.end("nope", TxOutcome.COMMIT, "pg")
        assert service.end(txid, TxOutcome.ROLLBACK, "pg").ended_now
        assert records(ms, "orders", 1) == []
        assert (
            ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 1).messages[0].properties["SPARKMQ_TX_END"]
            == "rollback"
        )


def test_multi_topic_transaction_commits_all_in_one_append_and_survives_reopen(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("a", 2)
        ms.create_topic("b", 2)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["a", "b", "a"])
        other = put_halves(ms, service, ["b"])
        service.end(txid, TxOutcome.COMMIT, "pg")
        assert [m.body for m in ms.get_messages("a", 1, 0, 10).messages] == [b"m0", b"m2"]
        assert [m.body for m in ms.get_messages("b", 1, 0, 10).messages] == [b"m1"]
        assert ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 1).messages[0].body == b"0,1,2,"
    with open_store(tmp_path / "s") as ms:
        service = TransactionService.open(ms)
        assert service.get(txid).outcome is TxOutcome.COMMIT  # type: ignore[union-attr]
        assert [t.transaction_id for t in service.pending("pg")] == [other]
        assert not service.end(txid, TxOutcome.COMMIT, "pg").ended_now
        assert len(ms.get_messages("a", 1, 0, 10).messages) == 2


def test_a_torn_end_gets_its_op_on_reopen_and_never_commits_twice(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders", "orders"])
        # The end's records reached the disk up to the final messages; the op did not.
        ms.append_records(
            [
                final_record(Half(raw, m.commitlog_offset))
                for raw, m in zip(
                    records(ms, TRANS_HALF_TOPIC),
                    ms.get_messages(TRANS_HALF_TOPIC, 0, 0, 10).messages,
                    strict=True,
                )
            ]
        )
        ms.abandon()
    with open_store(tmp_path / "s") as ms:
        service = TransactionService.open(ms)
        assert service.repaired == 1
        assert service.get(txid).outcome is TxOutcome.COMMIT  # type: ignore[union-attr]
        assert ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 5).messages[0].body == b"0,1,"
        assert not service.end(txid, TxOutcome.COMMIT, "pg").ended_now  # a check answer later
        assert len(ms.get_messages("orders", 1, 0, 10).messages) == 2
    with open_store(tmp_path / "s") as ms:
        assert TransactionService.open(ms).repaired == 0


def test_a_replica_without_a_role_opens_with_a_torn_end_and_repairs_it_once_writable(tmp_path: Path) -> None:
    """A replica-group member restarted after a crash mid-commit starts (its store takes no
    write before it has a role): the torn end stays open until it may write (found by the
    Jepsen run's Kafka transactions; such a member used to fail at start)."""
    txid = _torn_commit(tmp_path / "s", finals=1)
    with open_replicated(tmp_path / "s") as ms:
        ms.replica_log().advance_confirm(ms.commitlog_max_offset)  # all of it replicated
        service = TransactionService.open(ms)  # no role: nothing written, nothing raised
        assert service.repaired == 0
        assert [t.transaction_id for t in service.pending("pg")] == [txid]
        assert ms.queue_offsets(TRANS_OP_HALF_TOPIC) in ({}, {0: (0, 0)})
        ms.abandon()
    with open_store(tmp_path / "s") as ms:  # as a master (writable): repaired, once
        service = TransactionService.open(ms)
        assert service.repaired == 1
        assert service.get(txid).outcome is TxOutcome.COMMIT  # type: ignore[union-attr]
        assert len(ms.get_messages("orders", 1, 0, 10).messages) == 2


def test_a_batch_registered_again_after_a_rebuild_commits_once(tmp_path: Path) -> None:
    """A promoted replica rebuilds its table from the log, where a transaction's consecutive
    halves to one topic make one run. A batch of it stored before the failover whose
    acknowledgement failed comes back as a retry, found in the store and registered again, as
    its own shorter run: its halves are in the table already and must not be finalised twice."""
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)

        def batch(start: int) -> list:
            return ms.put_messages(
                [
                    Message(
                        topic="orders",
                        body=f"m{i}".encode(),
                        queue_id=1,
                        properties={"PGROUP": "pg", "__transactionId__": "tx1"},
                        transaction_prepared=True,
                    )
                    for i in range(start, start + 3)
                ]
            )

        first, second = batch(0), batch(3)
        service.register("tx1", "pg", first, NOW)
        rebuilt = TransactionService.open(ms)  # the promoted replica: one run of six halves
        assert [len(run) for run in rebuilt.get("tx1").runs] == [6]  # type: ignore[union-attr]
        rebuilt.register("tx1", "pg", second, NOW)  # the second batch's retry
        rebuilt.register("tx1", "pg", first[1:], NOW)  # a part of a registered run too
        assert rebuilt.get("tx1").half_count == 6  # type: ignore[union-attr]
        rebuilt.end("tx1", TxOutcome.COMMIT, "pg")
        assert [m.body for m in ms.get_messages("orders", 1, 0, 20).messages] == [
            f"m{i}".encode() for i in range(6)
        ]


class _BelowMinInsync:
    """The hooks of a master just elected, whose slaves have not caught up (``--min-insync 2``):
    every write is refused before anything is stored."""

    def check_writable(self) -> None:
        raise SlaveNotAvailable("1 in-sync replica(s), 2 required: nothing written")

    def appended(self, end_offset: int) -> None:
        return None

    def acknowledge(self, end_offset: int) -> None:
        raise SlaveNotAvailable("1 in-sync replica(s), 2 required", appended=True)


def test_a_new_master_below_min_insync_opens_with_a_torn_commit_and_never_commits_it_twice(
    tmp_path: Path,
) -> None:
    """A slave promoted with a commit's final messages but not its op (its old master died
    between them) opens its transaction service before any slave is in sync again: the repair
    cannot write yet. The service must still open (the member serves), and the commit's retry
    (the Kafka coordinator delivers its decided end again) must complete it, never append its
    final messages a second time (the Jepsen run's 55 outputs twice)."""
    txid = _torn_commit(tmp_path / "s", finals=2)
    with open_replicated(tmp_path / "s") as ms:
        replica = ms.replica_log()
        replica.advance_confirm(ms.commitlog_max_offset)
        replica.set_hooks(_BelowMinInsync())
        service = TransactionService.open(ms)  # the repair is refused: it opens all the same
        assert service.repaired == 0 and [t.transaction_id for t in service.pending("pg")] == [txid]
        with pytest.raises(SlaveNotAvailable):  # still no slave: the end is refused, nothing written
            service.end(txid, TxOutcome.COMMIT, "pg")
        assert len(ms.get_messages("orders", 1, 0, 10).messages) == 2
        replica.set_hooks(None)  # a slave caught up
        assert not service.end(txid, TxOutcome.COMMIT, "pg").ended_now  # decided before the failover
        assert service.get(txid).outcome is TxOutcome.COMMIT  # type: ignore[union-attr]
        replica.advance_confirm(ms.commitlog_max_offset)  # reads stop at the confirm offset
        assert len(ms.get_messages("orders", 1, 0, 10).messages) == 2
        assert len(ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 10).messages) == 1
        ms.abandon()


def test_discard_copies_the_half_with_its_check_times(tmp_path: Path) -> None:
    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        txid = put_halves(ms, service, ["orders"])
        service.end(txid, TxOutcome.DISCARD, None, check_times=15)
        (copy,) = ms.get_messages(TRANS_CHECK_MAX_TIME_TOPIC, 0, 0, 5).messages
        assert copy.properties["TRANSACTION_CHECK_TIMES"] == "15" and copy.body == b"m0"
        assert copy.properties["REAL_TOPIC"] == "orders"
        assert records(ms, "orders", 1) == []


def test_end_many_is_one_append_with_per_request_outcomes(tmp_path: Path) -> None:
    from store.publish.transactions import EndRequest

    with open_store(tmp_path / "s") as ms:
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        a, b = put_halves(ms, service, ["orders"]), put_halves(ms, service, ["orders", "orders"])
        before = ms.commitlog_max_offset
        results = service.end_many(
            [
                EndRequest(a, TxOutcome.COMMIT, "pg"),
                EndRequest("missing", TxOutcome.COMMIT, "pg"),
                EndRequest(b, TxOutcome.ROLLBACK, "pg"),
                EndRequest(a, TxOutcome.ROLLBACK, "pg"),  # the same transaction again: first wins
                EndRequest(b, TxOutcome.COMMIT, "other"),
            ]
        )
        assert isinstance(results[1], UnknownTransaction) and isinstance(results[4], ProducerGroupMismatch)
        first, _, second, again, _ = results
        assert not isinstance(first, Exception) and first.ended_now and first.outcome is TxOutcome.COMMIT
        assert not isinstance(second, Exception) and second.ended_now and second.outcome is TxOutcome.ROLLBACK
        assert not isinstance(again, Exception) and not again.ended_now and again.outcome is TxOutcome.COMMIT
        assert len(first.transaction.results) == 1
        assert [m.body for m in ms.get_messages("orders", 1, 0, 10).messages] == [b"m0"]
        ops = ms.get_messages(TRANS_OP_HALF_TOPIC, 0, 0, 10).messages
        assert [o.properties["SPARKMQ_TX_END"] for o in ops] == ["commit", "rollback"]
        assert ms.commitlog_max_offset > before
