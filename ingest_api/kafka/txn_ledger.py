"""The transaction coordinator's durable record of transactions that span brokers.

Kept in the state topic (:mod:`ingest_api.kafka.txn_log`, records PARTICIPANTS, DECISION and
COMPLETE of :mod:`ingest_api.kafka.txn_record`), so a replica group's promoted slave knows
every participant and decision its master acknowledged. Per transaction:

* A broker is added to ``participants`` (a PARTICIPANTS record put) *before* it is told
  about the transaction, so every broker that can hold halves of it is known after a crash
  or a failover.
* ``decision`` (commit / abort, a DECISION record) is put before any participant is asked to
  end its halves: from then on the outcome is fixed, and ends are retried (after a restart
  too) until every participant has ended its part. A COMPLETE record removes the entry
  once they all have.
* ``partitions`` are informative (DescribeTransactions after a restart); only
  ``participants`` and ``decision`` matter for exactly-once ends.

Transactions whose halves are all on the coordinator never appear here: they end as on a lone
broker (one atomic append).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from ingest_api.kafka.txn_log import TxnStateLog
from ingest_api.kafka.txn_record import Completed, Decided, LedgerEntry

__all__ = ["LedgerEntry", "TxnLedger"]


class TxnLedger:
    """The ledger (thread-safe; writes are store appends: call them from an executor). Each
    write changes the entries only once its record is in the log (the store's errors are
    raised, nothing changed)."""

    def __init__(self, log: TxnStateLog, entries: Mapping[str, LedgerEntry]) -> None:
        self._log = log
        self._entries = dict(entries)
        self._lock = log.lock  # shared: see TxnStateLog.keep_before

    def get(self, transaction_id: str) -> LedgerEntry | None:
        with self._lock:
            return self._entries.get(transaction_id)

    def entries(self) -> list[LedgerEntry]:
        with self._lock:
            return list(self._entries.values())

    def add(
        self,
        transaction_id: str,
        transactional_id: str,
        participants: set[str],
        partitions: set[tuple[str, int]],
    ) -> LedgerEntry:
        """Record more participants (and partitions); writes only when a participant is new."""
        with self._lock:
            current = self._entries.get(transaction_id) or LedgerEntry(transaction_id, transactional_id)
            grown = replace(
                current,
                participants=current.participants | participants,
                partitions=current.partitions | partitions,
            )
            if grown.participants != current.participants:
                self._log.append([replace(grown, decision=None)])
            self._entries[transaction_id] = grown
            return grown

    def decide(self, transaction_id: str, commit: bool) -> LedgerEntry:
        """Fix the outcome (durably) before any participant is asked to end."""
        with self._lock:
            entry = replace(self._entries[transaction_id], decision=commit)
            self._log.append([Decided(transaction_id, commit)])
            self._entries[transaction_id] = entry
            return entry

    def forget(self, transaction_id: str) -> None:
        """Every participant has ended its part."""
        with self._lock:
            if transaction_id in self._entries:
                self._log.append([Completed(transaction_id)])
                del self._entries[transaction_id]
