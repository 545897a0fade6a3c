"""The broker's table of transactions, in memory: what each one holds and how it ended.

One :class:`Transaction` per ``__transactionId__``: its halves and its outcome once an op record
ended it. Halves are kept as :class:`HalfRun` s — the halves one put stored back to back, bound
for one topic — as NumPy columns, so a Kafka transaction of thousands of records costs a few
objects, not one per record. The table is rebuilt from the half and op queues when the store
opens (:mod:`store.publish.transaction_recovery`) and kept current by
:class:`store.publish.transactions.TransactionService`, which serialises every change under its
lock; the table itself is not thread-safe.

Lookups by half offset serve recovery only (an op names half *queue* offsets; a final message
names its half's *CommitLog* offset), so they are built when recovery asks
(:meth:`TransactionTable.open_halves`), not kept per half while the broker runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import numpy.typing as npt

from store.names import TRANS_OFFSETS_TOPIC
from store.types import PutResult
from store.write.transactions import TxOutcome

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
#: ``real_queue_id`` of a half registered without reading it back (HTTP produce): its REAL_QID
#: is read from the half when the transaction commits.
UNKNOWN_QUEUE = -1


@dataclass(frozen=True, slots=True)
class HalfRef:
    """One half, for readers (``Transaction.halves``)."""

    commitlog_offset: int
    queue_offset: int
    real_topic: str
    real_queue_id: int = 0
    #: Stored size in bytes (0: unknown, e.g. rebuilt from the log).
    size: int = 0


@dataclass(frozen=True, slots=True)
class HalfRun:
    """Halves bound for ``real_topic`` (offsets records: ``rmq_sys_trans_offsets``), in log
    order. ``sizes`` is 0 where unknown; ``uniq_keys`` / ``keys`` / ``tags`` are their final
    messages' dispatch columns when the put knew them (else parsed at commit)."""

    commitlog_offsets: I64
    queue_offsets: I64
    sizes: I64
    real_topic: str
    real_queue_ids: I32
    uniq_keys: tuple[str, ...] | None = None
    keys: tuple[str | None, ...] | None = None
    tags: tuple[str | None, ...] | None = None

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    @staticmethod
    def of(refs: list[HalfRef]) -> HalfRun:
        """A run of single halves (all bound for ``refs[0].real_topic``)."""
        return HalfRun(
            np.array([r.commitlog_offset for r in refs], dtype=np.int64),
            np.array([r.queue_offset for r in refs], dtype=np.int64),
            np.array([r.size for r in refs], dtype=np.int64),
            refs[0].real_topic,
            np.array([r.real_queue_id for r in refs], dtype=np.int32),
        )

    def take(self, mask: npt.NDArray[np.bool_]) -> HalfRun:
        """The halves where ``mask`` is true (same order)."""
        picked = np.flatnonzero(mask).tolist()

        def pick(column: tuple[str | None, ...] | None) -> tuple[str | None, ...] | None:
            return None if column is None else tuple(column[i] for i in picked)

        uniq_keys = None if self.uniq_keys is None else tuple(self.uniq_keys[i] for i in picked)
        return HalfRun(
            self.commitlog_offsets[mask],
            self.queue_offsets[mask],
            self.sizes[mask],
            self.real_topic,
            self.real_queue_ids[mask],
            uniq_keys=uniq_keys,
            keys=pick(self.keys),
            tags=pick(self.tags),
        )

    def back_to_back(self) -> bool:
        """True when the halves are stored one right after the other (one read)."""
        sizes, offsets = self.sizes, self.commitlog_offsets
        return bool((sizes > 0).all()) and bool((offsets[1:] == offsets[:-1] + sizes[:-1]).all())


@dataclass
class Transaction:
    transaction_id: str
    producer_group: str
    born_ms: int
    runs: list[HalfRun] = field(default_factory=list)
    outcome: TxOutcome | None = None
    #: Final messages of a commit ended by this broker process (not rebuilt after a restart).
    results: list[PutResult] = field(default_factory=list)
    #: Check-backs sent for it (kept by the check dispatcher; 0 after a restart).
    check_times: int = 0
    last_check_ms: int | None = None
    #: The highest CommitLog offset of its halves (-1: none yet).
    last_offset: int = -1

    @property
    def halves(self) -> list[HalfRef]:
        """Every half, in registration order (builds one object per half: for listings)."""
        return [
            HalfRef(offset, queue_offset, run.real_topic, queue_id, size)
            for run in self.runs
            for offset, queue_offset, queue_id, size in zip(
                run.commitlog_offsets.tolist(),
                run.queue_offsets.tolist(),
                run.real_queue_ids.tolist(),
                run.sizes.tolist(),
                strict=True,
            )
        ]

    @property
    def half_count(self) -> int:
        return sum(len(run) for run in self.runs)

    @property
    def half_queue_offsets(self) -> list[int]:
        return [offset for run in self.runs for offset in run.queue_offsets.tolist()]

    @property
    def topics(self) -> list[str]:
        """The real topics of its messages (offsets records are not messages)."""
        return sorted({run.real_topic for run in self.runs if run.real_topic != TRANS_OFFSETS_TOPIC})


class TransactionTable:
    """Transactions by id; open transactions' halves by offset on demand (for recovery)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Transaction] = {}
        #: First CommitLog offset of every run of an open transaction (repeated registrations).
        self._open_runs: dict[int, Transaction] = {}

    def get(self, transaction_id: str) -> Transaction | None:
        return self._by_id.get(transaction_id)

    def get_or_add(self, transaction_id: str, producer_group: str, born_ms: int) -> Transaction:
        tx = self._by_id.get(transaction_id)
        if tx is None:
            tx = self._by_id[transaction_id] = Transaction(transaction_id, producer_group, born_ms)
        return tx

    def add_run(self, tx: Transaction, run: HalfRun) -> None:
        """Add halves to an open transaction. A run registered already (a repeated
        registration) and halves of an ended transaction change nothing."""
        if tx.outcome is not None or not len(run):
            return
        first = int(run.commitlog_offsets[0])
        if first in self._open_runs:
            return
        if int(run.commitlog_offsets.min()) <= tx.last_offset:
            # Halves it may hold already, under other run boundaries: a batch stored before a
            # failover and registered by its retry on the promoted replica, whose table rebuilt
            # from the log made one run of the transaction's consecutive halves. Each half is
            # finalised once (the Jepsen run's outputs twice).
            new = np.ones(len(run), dtype=np.bool_)
            for held in tx.runs:
                new &= ~np.isin(run.commitlog_offsets, held.commitlog_offsets)
            if not new.any():
                return
            if not new.all():
                run = run.take(new)
                first = int(run.commitlog_offsets[0])
        tx.runs.append(run)
        tx.last_offset = max(tx.last_offset, int(run.commitlog_offsets.max()))
        self._open_runs[first] = tx

    def end(self, tx: Transaction, outcome: TxOutcome) -> None:
        tx.outcome = outcome
        for run in tx.runs:
            self._open_runs.pop(int(run.commitlog_offsets[0]), None)

    def open_halves(self) -> tuple[dict[int, Transaction], dict[int, Transaction]]:
        """Open transactions by their halves' CommitLog offsets and half-queue offsets (an op
        names queue offsets, a final message its half's CommitLog offset)."""
        by_offset: dict[int, Transaction] = {}
        by_queue_offset: dict[int, Transaction] = {}
        for tx in self.pending():
            for run in tx.runs:
                by_offset.update(zip(run.commitlog_offsets.tolist(), repeat(tx)))
                by_queue_offset.update(zip(run.queue_offsets.tolist(), repeat(tx)))
        return by_offset, by_queue_offset

    def all(self) -> list[Transaction]:
        return list(self._by_id.values())

    def pending(self) -> list[Transaction]:
        return [t for t in self._by_id.values() if t.outcome is None and t.runs]
