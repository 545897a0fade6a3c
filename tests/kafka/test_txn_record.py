"""The coordinator's state records: golden bytes, the replay fold, and the state topic of a
real store (appends, the replay after a reopen, the upgrade from the old side files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest_api.kafka.producer_state import (
    LOCAL_COUNTER_BITS,
    LOCAL_HALF,
    LOCAL_PRODUCER_IDS_FILE,
    PRODUCER_ID_BLOCK_BITS,
    ProducerIdAllocator,
)
from ingest_api.kafka.txn_coordinator import TxnState
from ingest_api.kafka.txn_ledger import TxnLedger
from ingest_api.kafka.txn_log import (
    PRODUCER_IDS_FILE,
    TRANSACTIONAL_IDS_FILE,
    TXN_PARTICIPANTS_FILE,
    TxnStateLog,
)
from ingest_api.kafka.txn_record import (
    Completed,
    Decided,
    DurableId,
    IdChanged,
    LedgerEntry,
    ProducerIdBlock,
    TxnRecord,
    TxnTables,
    decode_txn_record,
    encode_txn_record,
)
from ingest_api.kafka.txn_state import TransactionalIds
from store import KAFKA_TXN_STATE_TOPIC, InvalidArgument, MessageStore, RecordFields
from tests.kafka.conftest import store_config
from tests.support.stores import light_config

PID = 4294967296  # member 1's first producer id

GOLDEN: list[tuple[TxnRecord, bytes]] = [
    (ProducerIdBlock(PID, 3), bytes.fromhex("010100000001000000000000000000000003")),
    (
        IdChanged("app", DurableId(PID, 2, 1, 60_000, TxnState.COMPLETE_ABORT)),
        bytes.fromhex("01020003") + b"app" + bytes.fromhex("0000000100000000000200010000ea6005"),
    ),
    (
        LedgerEntry("kafka-1-0-3", "app", frozenset({"b3", "b2"}), frozenset({("orders", 2), ("orders", 0)})),
        bytes.fromhex("0103")
        + b"\x00\x0bkafka-1-0-3"
        + b"\x00\x03app"
        + bytes.fromhex("0002")
        + b"\x00\x02b2\x00\x02b3"
        + bytes.fromhex("00000002")
        + b"\x00\x06orders\x00\x00\x00\x00"
        + b"\x00\x06orders\x00\x00\x00\x02",
    ),
    (Decided("kafka-1-0-3", True), b"\x01\x04\x00\x0bkafka-1-0-3\x01"),
    (Completed("kafka-1-0-3"), b"\x01\x05\x00\x0bkafka-1-0-3"),
]


@pytest.mark.parametrize(("record", "body"), GOLDEN)
def test_golden_bytes(record: TxnRecord, body: bytes) -> None:
    assert encode_txn_record(record) == body
    assert decode_txn_record(body) == record


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not a Kafka transaction state record"),
        (b"\x02\x01" + bytes(16), "version 2"),
        (b"\x01\x09", "kind 9 is unknown"),
        (b"\x01\x01" + bytes(15), "not a Kafka transaction state record"),
        (b"\x01\x01" + bytes(17), "1 bytes after"),
        (b"\x01\x04\x00\x01x\x07", "decision byte 7"),
        (b"\x01\x02\x00\x01x" + bytes(16) + b"\x09", "state code 9"),
        (b"\x01\x05\x00\x05ab", "runs past the end"),
        (b"\x01\x05\x00\x02\xff\xfe", "not a Kafka transaction state record"),
    ],
)
def test_a_body_that_is_not_a_record_is_refused(body: bytes, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        decode_txn_record(body)


def test_out_of_range_values_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="out of range"):
        encode_txn_record(IdChanged("t", DurableId(1, 40_000, -1, 1000)))
    with pytest.raises(InvalidArgument, match="65535"):
        encode_txn_record(Completed("x" * 70_000))


def test_the_replay_folds_records_in_order() -> None:
    tables = TxnTables()
    records: list[TxnRecord] = [
        ProducerIdBlock(0, 2),
        ProducerIdBlock(PID, 1),
        ProducerIdBlock(0, 1),  # an older counter never lowers the block
        IdChanged("a", DurableId(0, 0, -1, 1000)),
        IdChanged("a", DurableId(0, 1, 0, 1000)),  # the last record of an id wins
        LedgerEntry("kafka-0-1-1", "a", frozenset({"b2"}), frozenset({("t", 1)})),
        LedgerEntry("kafka-0-1-1", "a", frozenset({"b3"}), frozenset({("t", 2)})),
        Decided("kafka-0-1-1", False),
        LedgerEntry("kafka-0-1-2", "a", frozenset({"b2"})),
        Completed("kafka-0-1-2"),
        Decided("kafka-9-9-9", True),  # of nothing known: ignored
    ]
    for record in records:
        tables.apply(record)
    assert tables.producer_ids == {0: 2, PID: 1}
    assert tables.transactional_ids == {"a": DurableId(0, 1, 0, 1000)}
    assert tables.ledger == {
        "kafka-0-1-1": LedgerEntry(
            "kafka-0-1-1", "a", frozenset({"b2", "b3"}), frozenset({("t", 1), ("t", 2)}), False
        )
    }
    rebuilt = TxnTables()
    for record in tables.records():
        rebuilt.apply(record)
    assert rebuilt == tables


def test_state_changes_are_records_of_the_store_and_survive_a_reopen(tmp_path: Path) -> None:
    config = store_config(tmp_path / "store")
    with MessageStore.open(config) as store:
        log = TxnStateLog(store, PID)
        tables = log.load()
        ids = ProducerIdAllocator(log, tables.producer_ids, PID)
        assert [ids.allocate(), ids.allocate()] == [PID, PID + 1]
        TransactionalIds(log, tables.transactional_ids).save("app", DurableId(PID, 0, -1, 9000))
        ledger = TxnLedger(log, tables.ledger)
        ledger.add("kafka-x-0-1", "app", {"b2"}, {("t", 0)})
        ledger.add("kafka-x-0-1", "app", {"b2"}, {("t", 1)})  # no new broker: no record
        ledger.decide("kafka-x-0-1", True)
        assert store.max_offset(KAFKA_TXN_STATE_TOPIC, 0) == 5
        store.abandon()  # as a kill -9 leaves it
    with MessageStore.open(config) as store:
        log = TxnStateLog(store, PID)
        tables = log.load()
        assert tables.transactional_ids == {"app": DurableId(PID, 0, -1, 9000)}
        assert tables.ledger["kafka-x-0-1"].decision is True
        again = ProducerIdAllocator(log, tables.producer_ids, PID)
        assert again.allocate() == PID + 2
        assert again.issued(PID + 1) and not again.issued(PID + 3) and not again.issued(0)
        TxnLedger(log, tables.ledger).forget("kafka-x-0-1")
        assert log.load().ledger == {}


def test_a_store_of_an_older_version_is_upgraded_from_its_side_files_once(tmp_path: Path) -> None:
    config = store_config(tmp_path / "store")
    config_dir = tmp_path / "store" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / PRODUCER_IDS_FILE).write_text('{"next_producer_id": 7}')
    ids = {"transactionalIds": {"app": {"producerId": 6, "producerEpoch": 3, "timeoutMs": 5000}}}
    (config_dir / TRANSACTIONAL_IDS_FILE).write_text(json.dumps(ids))
    ledger = {
        "transactions": {
            "kafka-6-3-1": {"transactionalId": "app", "participants": ["b2"], "decision": "abort"}
        }
    }
    (config_dir / TXN_PARTICIPANTS_FILE).write_text(json.dumps(ledger))
    with MessageStore.open(config) as store:
        tables = TxnStateLog(store).load()
        assert tables.producer_ids == {0: 7}
        assert tables.transactional_ids == {"app": DurableId(6, 3, -1, 5000)}
        assert tables.ledger["kafka-6-3-1"] == LedgerEntry(
            "kafka-6-3-1", "app", frozenset({"b2"}), decision=False
        )
        assert store.max_offset(KAFKA_TXN_STATE_TOPIC, 0) == 4  # written as records
        assert sorted(p.name for p in config_dir.glob("kafka*")) == [
            f"{PRODUCER_IDS_FILE}.migrated",
            f"{TRANSACTIONAL_IDS_FILE}.migrated",
            f"{TXN_PARTICIPANTS_FILE}.migrated",
        ]
        assert TxnStateLog(store).load() == tables  # from the records now


def test_a_malformed_side_file_is_refused_with_its_path(tmp_path: Path) -> None:
    config_dir = tmp_path / "store" / "config"
    config_dir.mkdir(parents=True)
    (config_dir / TXN_PARTICIPANTS_FILE).write_text('{"transactions": {"kafka-1-0-1": {"participants": []}}}')
    with (
        MessageStore.open(store_config(tmp_path / "store")) as store,
        pytest.raises(InvalidArgument, match=TXN_PARTICIPANTS_FILE),
    ):
        TxnStateLog(store).load()


def test_an_unreadable_record_names_its_queue_offset(tmp_path: Path) -> None:
    with MessageStore.open(store_config(tmp_path / "store")) as store:
        log = TxnStateLog(store)
        log.append([ProducerIdBlock(0, 1)])
        host = (store.config.store_host, store.config.store_port)
        store.append_records(
            [RecordFields(topic=KAFKA_TXN_STATE_TOPIC, body=b"\x07", born_host=host, store_host=host)]
        )
        with pytest.raises(InvalidArgument, match=f"{KAFKA_TXN_STATE_TOPIC} queue offset 1"):
            log.load()


def test_retention_keeps_the_live_state_by_writing_it_again(tmp_path: Path) -> None:
    config = light_config(tmp_path / "store", commitlog_file_size_bytes=64 * 1024)
    with MessageStore.open(config) as store:
        log = TxnStateLog(store)
        ids = ProducerIdAllocator(log, {})
        names = TransactionalIds(log, {})
        ledger = TxnLedger(log, {})
        ids.allocate()
        names.save("app", DurableId(0, 4, 3, 9000))
        ledger.add("kafka-0-4-1", "app", {"b2"}, {("t", 1)})
        ledger.decide("kafka-0-4-1", False)
        before = log.load()

        def live() -> TxnTables:
            entries = {e.transaction_id: e for e in ledger.entries()}
            return TxnTables(ids.blocks(), names.all(), entries)

        store.add_retention_listener(lambda end: log.keep_before(end, live))
        store.create_topic("filler", 1)
        store.put_batch("filler", [b"x" * 900] * 300, queue_ids=0)  # several files past the records
        later = store.now_ms() + 7 * 86_400_000
        assert store.run_retention(now_ms=later, force=True) >= 3
        assert store.min_offset(KAFKA_TXN_STATE_TOPIC, 0) > 0  # the first records are gone
        assert log.load() == before  # written again before they went
    with MessageStore.open(config) as store:
        assert TxnStateLog(store).load() == before  # and so after a reopen


def test_ids_handed_out_without_a_record_are_of_the_members_own_half_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    """What a slave hands out (it cannot put the record): the upper half of its block, from a
    local counter file written before the answer; recorded ids stay in the lower half."""
    config = store_config(tmp_path / "store")
    with MessageStore.open(config) as store:
        log = TxnStateLog(store, PID)
        ids = ProducerIdAllocator(log, log.load().producer_ids, PID)
        first, second = ids.allocate_local(), ids.allocate_local()
        assert second == first + 1 and PID + LOCAL_HALF <= first < PID + (1 << PRODUCER_ID_BLOCK_BITS)
        assert ids.allocate() == PID  # the recorded counter is apart
        store.abandon()
    with MessageStore.open(config) as store:
        log = TxnStateLog(store, PID)
        again = ProducerIdAllocator(log, log.load().producer_ids, PID)
        assert again.allocate_local() == second + 1  # the counter file outlived the process
    counter_file = config.store_dir / "config" / LOCAL_PRODUCER_IDS_FILE
    counter_file.write_text('{"generation": -1, "next": 3}')  # not a generation: a new one is drawn
    with MessageStore.open(config) as store:
        log = TxnStateLog(store, PID)
        fresh = ProducerIdAllocator(log, log.load().producer_ids, PID).allocate_local()
        assert fresh >= PID + LOCAL_HALF and fresh % (1 << LOCAL_COUNTER_BITS) == 0
