"""A cluster broker's Kafka transactions after a restart (blocking, before the gateway serves).

:func:`ingest_api.kafka.txn_state.recover` rebuilds the transactional ids this broker
coordinates from its state topic and its log, and lists the open Kafka transactions nobody owns.
In a cluster two things change:

* An open transaction of a transactional id this broker never initialised is a *participant's*
  part of a transaction coordinated elsewhere: it is left open for its coordinator to end
  (never aborted here: the coordinator may have decided to commit it).
* The ledger (:mod:`ingest_api.kafka.txn_ledger`) completes the picture of this broker's own
  transactions that span brokers: an open one comes back Ongoing at its sequence even when this
  broker holds none of its halves (a full timeout from the restart); a decided one comes back
  PrepareCommit/PrepareAbort and its end is delivered again to every participant
  (:class:`PendingEnd`, started once the loop runs); an open one of an older epoch is decided
  aborted and delivered the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.txn_coordinator import TxnState, parse_transaction_id
from ingest_api.kafka.txn_state import producer_group
from store import SparkMQError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PendingEnd:
    transactional_id: str
    transaction_id: str
    commit: bool
    brokers: frozenset[str]


def recover_cluster(ctx: GatewayContext, orphans: list[str]) -> tuple[list[str], list[PendingEnd]]:
    """``(orphans to abort here, ends to deliver again)`` (see the module docstring)."""
    assert ctx.cluster is not None
    assert ctx.ledger is not None
    mine = {producer_group(tid) for tid in ctx.transactional_ids.all()}
    kept = []
    for txid in orphans:
        tx = ctx.transactions.get(txid)
        if tx is not None and tx.producer_group not in mine:
            log.info(
                "transaction %s (%s) is coordinated by another broker: left open", txid, tx.producer_group
            )
            continue
        kept.append(txid)
    pending: list[PendingEnd] = []
    for record in ctx.ledger.entries():
        txid = record.transaction_id
        if txid in kept:
            kept.remove(txid)  # ended below, with its participants
        parsed = parse_transaction_id(txid)
        entry = ctx.txn.get(record.transactional_id)
        current = (
            entry is not None
            and parsed is not None
            and parsed[:2] == (entry.producer_id, entry.epoch)
            and parsed[2] >= entry.sequence
        )
        if current and entry is not None and parsed is not None:
            entry.sequence = parsed[2]
            entry.partitions |= set(record.partitions)
            if record.decision is None:
                entry.state = TxnState.ONGOING
                entry.started_ms = ctx.txn.now_ms()
                continue
            entry.state = TxnState.PREPARE_COMMIT if record.decision else TxnState.PREPARE_ABORT
        decision = bool(record.decision)
        if record.decision is None:
            log.warning("transaction %s has no current producer epoch: aborting it everywhere", txid)
            try:
                ctx.ledger.decide(txid, False)
            except SparkMQError as exc:  # a replica group's slave: decided once it is promoted
                log.warning("transaction %s left undecided: %s", txid, exc)
                continue
        brokers = frozenset({*record.participants, ctx.cluster.me})
        pending.append(PendingEnd(record.transactional_id, txid, decision, brokers))
    return kept, pending
