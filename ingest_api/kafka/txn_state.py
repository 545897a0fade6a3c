"""Durable transactional state: the transactional ids, and the coordinator rebuilt from them and the log.

* :class:`TransactionalIds` maps each ``transactional.id`` to its producer id, epoch, previous
  epoch and ``transaction.timeout.ms``: a TRANSACTIONAL record of the state topic
  (:mod:`ingest_api.kafka.txn_log`) is put before InitProducerId answers and before a
  timed-out producer is fenced, so an epoch once handed out is never handed out again and a
  fenced producer stays fenced across restarts and a replica group's failovers.
* Everything else is in the log: a Kafka transaction is the sparkmq transaction
  ``kafka-<producer id>-<epoch>-<n>`` of producer group ``kafka:<transactional.id>`` (the id
  percent-encoded as store names are), rebuilt by ``store.publish.TransactionService`` when the
  store opens. :func:`recover` gives each transactional id the state of its newest transaction
  at the current epoch: open -> Ongoing (its partitions from the halves), committed ->
  CompleteCommit, rolled back or discarded -> CompleteAbort. Any other open Kafka transaction
  (an older epoch's, after a crash between its abort and the new epoch; an unknown id's) is
  returned to be aborted before the gateway serves.
"""

from __future__ import annotations

from collections.abc import Mapping

from ingest_api.kafka.names import from_store, to_store
from ingest_api.kafka.txn_coordinator import TxnCoordinator, TxnEntry, TxnState, parse_transaction_id
from ingest_api.kafka.txn_log import TxnStateLog
from ingest_api.kafka.txn_record import DurableId, IdChanged
from store import TRANS_OFFSETS_TOPIC
from store.publish import KAFKA_PRODUCER_GROUP_PREFIX, TransactionService, TxOutcome


def producer_group(transactional_id: str) -> str:
    """The sparkmq producer group (``PGROUP``) of a transactional id's transactions."""
    return KAFKA_PRODUCER_GROUP_PREFIX + to_store(transactional_id)


class TransactionalIds:
    """Transactional id -> :class:`DurableId`, kept in the state topic (thread-safe;
    :meth:`save` is a store append: call it from an executor)."""

    def __init__(self, log: TxnStateLog, durable: Mapping[str, DurableId]) -> None:
        self._log = log
        self._lock = log.lock  # shared: see TxnStateLog.keep_before
        self._ids = dict(durable)

    def all(self) -> dict[str, DurableId]:
        with self._lock:
            return dict(self._ids)

    def save(self, transactional_id: str, durable: DurableId) -> None:
        """Once the record is in the log (raises the store's errors: nothing changed)."""
        with self._lock:
            self._log.append([IdChanged(transactional_id, durable)])
            self._ids[transactional_id] = durable


_COMPLETE = {
    TxOutcome.COMMIT: TxnState.COMPLETE_COMMIT,
    TxOutcome.ROLLBACK: TxnState.COMPLETE_ABORT,
    TxOutcome.DISCARD: TxnState.COMPLETE_ABORT,
}


def recover(coordinator: TxnCoordinator, ids: TransactionalIds, service: TransactionService) -> list[str]:
    """Install every durable transactional id in ``coordinator``; returns the sparkmq ids of
    open Kafka transactions that no current epoch owns (the caller aborts them)."""
    durable = ids.all()
    owners = {producer_group(tid): tid for tid in durable}
    newest: dict[str, tuple[int, str]] = {}  # transactional id -> (n, sparkmq id)
    orphans: list[str] = []
    transactions = {t.transaction_id: t for t in service.transactions() if t.producer_group in owners}
    for tx in service.pending():
        if tx.producer_group.startswith(KAFKA_PRODUCER_GROUP_PREFIX) and tx.producer_group not in owners:
            orphans.append(tx.transaction_id)
    for tx in transactions.values():
        tid = owners[tx.producer_group]
        parsed = parse_transaction_id(tx.transaction_id)
        current = durable[tid]
        if parsed is None or parsed[:2] != (current.producer_id, current.epoch):
            if tx.outcome is None:
                orphans.append(tx.transaction_id)
            continue
        if tid not in newest or parsed[2] > newest[tid][0]:
            newest[tid] = (parsed[2], tx.transaction_id)
    current_ids = {txid for _, txid in newest.values()}
    orphans.extend(  # an older transaction of the current epoch left open: never the producer's
        t.transaction_id
        for t in transactions.values()
        if t.outcome is None and t.transaction_id not in current_ids and t.transaction_id not in orphans
    )
    for tid, d in durable.items():
        entry = TxnEntry(tid, d.producer_id, d.epoch, d.timeout_ms, last_epoch=d.last_epoch, state=d.state)
        if tid in newest:
            entry.sequence, txid = newest[tid]
            tx = transactions[txid]
            entry.state = TxnState.ONGOING if tx.outcome is None else _COMPLETE[tx.outcome]
            entry.partitions = {
                (from_store(h.real_topic), h.real_queue_id)
                for h in tx.halves
                if h.real_topic != TRANS_OFFSETS_TOPIC
            }
        coordinator.recover(entry)
    return orphans
