"""The transaction coordinator's durable record of transactions that span brokers.

``config/kafkaTxnParticipants.json`` in the coordinator's store directory::

    {"transactions": {
       "kafka-4294967296-0-3": {"transactionalId": "app-1",
                                "participants": ["b2", "b3"],
                                "partitions": [["orders", 1], ["orders", 2]],
                                "decision": null}}}

* A broker is added to ``participants`` (and the file rewritten atomically: temp file, fsync,
  rename, directory fsync) *before* it is told about the transaction, so every broker that can
  hold halves of it is known after a crash.
* ``decision`` (``"commit"`` / ``"abort"``) is written before any participant is asked to end its
  halves: from then on the outcome is fixed, and ends are retried (after a restart too) until
  every participant has ended its part. The entry is removed once they all have.
* ``partitions`` are informative (DescribeTransactions after a restart); only
  ``participants`` and ``decision`` matter for exactly-once ends.

Transactions whose halves are all on the coordinator never appear here: they end as on a lone
broker (one atomic append).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from store import InvalidArgument, read_json, write_json_atomically

TXN_PARTICIPANTS_FILE = "kafkaTxnParticipants.json"
COMMIT = "commit"
ABORT = "abort"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    transaction_id: str
    transactional_id: str
    participants: frozenset[str] = frozenset()
    partitions: frozenset[tuple[str, int]] = frozenset()
    #: ``None`` while open; ``True`` commit, ``False`` abort once decided.
    decision: bool | None = None


@dataclass
class TxnLedger:
    """The file above (thread-safe; writes fsync: call them from an executor)."""

    path: Path
    _entries: dict[str, LedgerEntry] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def open(cls, path: Path) -> TxnLedger:
        ledger = cls(path)
        document = read_json(path) or {}
        raw = document.get("transactions", {})
        if not isinstance(raw, dict):
            raise InvalidArgument(f"{path}: transactions is not an object")
        for txid, value in raw.items():
            ledger._entries[str(txid)] = _decode(str(txid), value, path)
        return ledger

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
            self._entries[transaction_id] = grown
            if grown.participants != current.participants:
                self._write()
            return grown

    def decide(self, transaction_id: str, commit: bool) -> LedgerEntry:
        """Fix the outcome (durably) before any participant is asked to end."""
        with self._lock:
            entry = replace(self._entries[transaction_id], decision=commit)
            self._entries[transaction_id] = entry
            self._write()
            return entry

    def forget(self, transaction_id: str) -> None:
        """Every participant has ended its part."""
        with self._lock:
            if self._entries.pop(transaction_id, None) is not None:
                self._write()

    def _write(self) -> None:
        document = {"transactions": {txid: _encode(e) for txid, e in sorted(self._entries.items())}}
        write_json_atomically(self.path, document)


def _encode(entry: LedgerEntry) -> dict[str, object]:
    return {
        "transactionalId": entry.transactional_id,
        "participants": sorted(entry.participants),
        "partitions": [list(p) for p in sorted(entry.partitions)],
        "decision": None if entry.decision is None else (COMMIT if entry.decision else ABORT),
    }


def _decode(transaction_id: str, value: object, path: Path) -> LedgerEntry:
    try:
        assert isinstance(value, dict)
        decision = value.get("decision")
        if decision not in (None, COMMIT, ABORT):
            raise ValueError(f"decision {decision!r}")
        return LedgerEntry(
            transaction_id=transaction_id,
            transactional_id=str(value["transactionalId"]),
            participants=frozenset(str(p) for p in value["participants"]),
            partitions=frozenset((str(t), int(q)) for t, q in value.get("partitions", [])),
            decision=None if decision is None else decision == COMMIT,
        )
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"{path}: entry {transaction_id!r} is malformed ({exc})") from None
