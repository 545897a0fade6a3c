"""Transactional state across broker restarts, clean and abandoned (``kill -9`` as the store
sees it): producer ids and epochs, open transactions rebuilt from the log, a commit whose answer
was lost, AddPartitionsToTxn forgotten by the restart, and orphans aborted."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ingest_api.kafka import GatewayThread
from ingest_api.kafka.txn_log import TxnStateLog
from ingest_api.kafka.txn_record import DurableId, IdChanged
from store import KAFKA_TXN_STATE_TOPIC, MessageStore
from tests.kafka.conftest import gateway_config, store_config
from tests.kafka.test_wire_transactions import TID, TxnClient, tx_batch


@contextmanager
def broker(
    path: Path, *, crash: bool = False, file_bytes: int | None = None
) -> Iterator[tuple[MessageStore, GatewayThread, TxnClient]]:
    """A store and gateway; ``crash`` abandons the store instead of closing it; ``file_bytes``:
    the CommitLog file size (default 64 MiB)."""
    config = store_config(path)
    if file_bytes is not None:
        config = config.with_changes(commitlog_file_size_bytes=file_bytes)
    store = MessageStore.open(config)
    gateway = GatewayThread(store, gateway_config()).start()
    client = TxnClient(gateway.port)
    try:
        yield store, gateway, client
    finally:
        client.close()
        gateway.stop()
        if crash:
            store.abandon()
        else:
            store.close()


def bodies(store: MessageStore, topic: str, partition: int = 0) -> list[bytes]:
    return store.read_batch(topic, partition, 0, 100).batch.column("body").to_pylist()


def test_an_open_transaction_survives_a_crash_and_commits_once(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with broker(path, crash=True) as (store, _, txn):
        store.create_topic("out", 2)
        store.create_topic("in", 1)
        pid = txn.init().producer_id
        assert TxnStateLog(store).load().transactional_ids == {TID: DurableId(pid, 0, -1, 60_000)}
        txn.add_partitions(pid, 0, {"out": [0, 1]})
        assert txn.produce("out", 0, tx_batch([b"a", b"b"], pid, 0, 0)) == (0, -1)
        assert txn.txn_commit(pid, 0, "ctp", {("in", 0): 3}) == {0}
    with broker(path) as (store, gateway, txn):
        entry = gateway.gateway.context.txn.get(TID)  # type: ignore[union-attr]
        assert entry is not None and entry.state.value == "Ongoing" and entry.partitions == {("out", 0)}
        # The producer did not see the answer: it retries the batch, then adds one and commits.
        assert txn.produce("out", 0, tx_batch([b"a", b"b"], pid, 0, 0)) == (0, -1)
        assert txn.produce("out", 1, tx_batch([b"c"], pid, 0, 0)) == (0, -1)
        assert bodies(store, "out") == []
        assert txn.end(pid, 0, commit=True) == 0
        assert bodies(store, "out", 0) == [b"a", b"b"] and bodies(store, "out", 1) == [b"c"]
        assert store.committed_offsets("ctp", "in") == {0: 3}
        assert txn.init().producer_epoch == 1  # epochs keep counting across restarts


def test_a_commit_whose_answer_was_lost_is_answered_again_and_its_offsets_kept(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with broker(path, crash=True) as (store, _, txn):
        store.create_topic("out", 1)
        store.create_topic("in", 1)
        pid = txn.init().producer_id
        txn.add_partitions(pid, 0, {"out": [0]})
        txn.produce("out", 0, tx_batch([b"x"], pid, 0, 0))
        txn.txn_commit(pid, 0, "ctp", {("in", 0): 8})
        assert txn.end(pid, 0, commit=True) == 0  # appended; the offset table is not persisted
    with broker(path) as (store, _, txn):
        assert store.committed_offsets("ctp", "in") == {0: 8}  # re-applied from the log
        assert txn.end(pid, 0, commit=True) == 0  # the client's retry
        # An abort with nothing ongoing: after a restart the broker cannot tell a lost
        # AddPartitionsToTxn from a wrong call, so it answers NONE and changes nothing.
        assert txn.end(pid, 0, commit=False) == 0
        assert bodies(store, "out") == [b"x"]
        txn.add_partitions(pid, 0, {"out": [0]})  # the next transaction: kafka-<pid>-0-2
        txn.produce("out", 0, tx_batch([b"y"], pid, 0, 1))
        assert txn.end(pid, 0, commit=True) == 0
        assert bodies(store, "out") == [b"x", b"y"]


def test_a_restart_between_add_partitions_and_produce_is_forgiven(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with broker(path) as (store, _, txn):
        store.create_topic("out", 1)
        pid = txn.init().producer_id
        txn.add_partitions(pid, 0, {"out": [0]})  # only in memory: lost with the restart
    with broker(path) as (store, _, txn):
        assert txn.produce("out", 0, tx_batch([b"z"], pid, 0, 0)) == (0, -1)  # begins it implicitly
        assert txn.end(pid, 0, commit=True) == 0
        assert bodies(store, "out") == [b"z"]
        assert txn.end(pid, 0, commit=True) == 0
    with broker(path) as (_, _, txn):
        assert txn.end(pid, 0, commit=False) == 0  # recovered, nothing ongoing: nothing to end


def test_an_open_transaction_of_an_old_epoch_is_aborted_at_start(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with broker(path, crash=True) as (store, _, txn):
        store.create_topic("out", 1)
        pid = txn.init().producer_id
        txn.add_partitions(pid, 0, {"out": [0]})
        txn.produce("out", 0, tx_batch([b"orphan"], pid, 0, 0))
        # As if the crash hit after the new epoch's record, before the abort of the old one.
        TxnStateLog(store).append([IdChanged(TID, DurableId(pid, 1, 0, 60_000))])
    with broker(path) as (store, gateway, txn):
        tx = gateway.gateway.context.transactions.get(f"kafka-{pid}-0-1")  # type: ignore[union-attr]
        assert tx is not None and tx.outcome is not None and tx.outcome.value == "rollback"
        assert txn.end(pid, 0, commit=True) == 90  # PRODUCER_FENCED
        assert bodies(store, "out") == []


def test_the_transactional_ids_outlive_the_retention_of_their_records(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with broker(path, file_bytes=64 * 1024) as (store, _, txn):
        pid = txn.init().producer_id
        store.create_topic("filler", 1)
        store.put_batch("filler", [b"x" * 900] * 300, queue_ids=0)
        assert store.run_retention(now_ms=store.now_ms() + 7 * 86_400_000, force=True) >= 3
        assert store.min_offset(KAFKA_TXN_STATE_TOPIC, 0) > 0  # the first records are gone
    with broker(path, file_bytes=64 * 1024) as (_, _, txn):
        again = txn.init()
        assert (again.producer_id, again.producer_epoch) == (pid, 1)  # the id and its epoch kept
