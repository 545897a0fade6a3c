"""Transactional messages, broker side: RocketMQ's half/op model with an atomic, idempotent end.

A transaction is one or more half messages in ``RMQ_SYS_TRANS_HALF_TOPIC`` that share a
``__transactionId__`` (RocketMQ: the half's UNIQ_KEY; a multi-message transaction uses its first
message's). Ending it appends, **in one atomic append**:

* commit: the final messages (:func:`store.write.transactions.final_record`) and one op record
  naming every half queue offset;
* rollback: the op record only;
* discard (after the last check-back): the halves copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` with
  ``TRANSACTION_CHECK_TIMES``, and the op.

The service keeps the table of transactions (pending and ended) in memory and rebuilds it from
the half and op queues when the store opens, so a second end of a transaction — a producer
commit racing a check-back answer, a retried request — is a no-op that reports the first
outcome; RocketMQ can write a second final message there (operators.md §1.3).

A transaction may also carry consumer offsets (:meth:`TransactionService.put_offsets`, Kafka's
``TxnOffsetCommit``): one more half whose final record, in ``rmq_sys_trans_offsets``, is part of
the commit's append; the offsets are applied to the offset table right after that append, in
log order, and never on rollback. :meth:`TransactionService.open` rebuilds the table, completes
commits torn by a crash and re-applies offsets the persisted offset table lacks
(:mod:`store.publish.transaction_recovery`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from store.errors import (
    FlushSlaveTimeout,
    FlushTimeout,
    InvalidArgument,
    NotMaster,
    SlaveNotAvailable,
    SparkMQError,
    StoreError,
    StoreNotWritable,
)
from store.format.record import RecordFields
from store.message_store import MessageStore
from store.names import TRANS_HALF_TOPIC, TRANS_OFFSETS_TOPIC
from store.publish.transaction_recovery import reapply_offsets, rebuild, repair
from store.publish.transaction_table import UNKNOWN_QUEUE, HalfRef, HalfRun, Transaction, TransactionTable
from store.types import MessageView, PutResult
from store.write.encoded import EncodedRecords
from store.write.final_batch import final_records
from store.write.results import BatchPutResult
from store.write.transactions import (
    Half,
    HalfOf,
    TxOffsets,
    TxOutcome,
    discard_record,
    final_record,
    offsets_half_record,
    op_record,
    parse_offsets_body,
)

log = logging.getLogger(__name__)

#: Runs of at most this many halves are ended record by record (the single-message transactions
#: of the HTTP door: ~20 µs a record, against ~1 ms of fixed cost for the vectorised splice).
SMALL_RUN = 32

__all__ = [
    "EndRequest",
    "EndResult",
    "HalfRef",
    "ProducerGroupMismatch",
    "Transaction",
    "TransactionService",
    "UnknownTransaction",
]


class UnknownTransaction(SparkMQError):
    code = "unknown_transaction"


class ProducerGroupMismatch(InvalidArgument):
    """RocketMQ ``checkPrepareMessage``: the end names another producer group than the half."""

    code = "producer_group_mismatch"


@dataclass(frozen=True, slots=True)
class EndRequest:
    transaction_id: str
    outcome: TxOutcome
    producer_group: str | None
    check_times: int = 0
    #: Fill ``Transaction.results`` (one PutResult per final message) for the caller.
    want_results: bool = True


@dataclass(frozen=True, slots=True)
class EndResult:
    transaction: Transaction
    outcome: TxOutcome
    #: False when the transaction had ended already (the call changed nothing).
    ended_now: bool


@dataclass(slots=True)
class _EndRecords:
    """The records of one end and, for a commit, which of them carry offsets."""

    records: EncodedRecords
    offsets: list[tuple[int, TxOffsets]]  # (index in records, offsets)


class TransactionService:
    """The transaction table and the one place that ends transactions. Thread-safe."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._table = TransactionTable()
        self.repaired = 0
        self.reapplied_offsets = 0
        #: Where an end whose append raised after storing (not acknowledged) may lie: the next
        #: end first settles what the log holds from there (:meth:`_settle`), never appending
        #: a commit's final messages twice.
        self._unsettled_from: int | None = None
        #: Set when a promoted replica rebuilds its table into a new service (:meth:`retire`).
        self._retired: str | None = None

    @classmethod
    def open(cls, store: MessageStore) -> TransactionService:
        """Rebuild, repair torn commits, re-apply offsets (:mod:`store.publish.transaction_recovery`).

        A replica that takes no write yet (a replica-group member before its role is known)
        leaves its torn commits open: as a slave it truncates its tail to the master's log
        anyway, and as a master it opens the service again (``broker.membership``) and repairs
        them then. Before this, such a member could not start at all."""
        service = cls(store)
        last_op = rebuild(store, service._table)
        try:
            service.repaired = repair(store, service._table, last_op, service._complete_torn)
        except (StoreNotWritable, FlushSlaveTimeout, FlushTimeout) as exc:
            # No role yet (NotMaster), or a master just elected whose slaves are not in sync
            # again (SlaveNotAvailable under --min-insync): the torn commits stay open, and the
            # first end settles them before anything else (a decided end delivered again must
            # complete its commit, never append its final messages twice).
            service._unsettled_from = last_op
            log.warning("transactions: torn commit(s) left for the first end this member takes: %s", exc)
        service.reapplied_offsets = reapply_offsets(store)
        return service

    def _settle(self) -> None:
        """(Lock held.) An end whose append raised after storing it (``FLUSH_SLAVE_TIMEOUT``, the
        in-sync set shrinking after the append, a flush timeout) is in the log though the table
        says open, and its offsets were not applied: the client's retry would append the final
        messages again. Complete such commits as recovery completes a torn one (the op, and any
        final message missing), then apply the offsets records the table lacks. The appended op
        is acknowledged only once everything before it is: until then this raises again, and
        the end stays unsettled for the next try. A rolled-back end is an op only: a second op
        naming the same halves changes nothing."""
        start = self._unsettled_from
        if start is None:
            return
        repair(self.store, self._table, start, self._complete_torn, what="stored but not acknowledged")
        self.reapplied_offsets += reapply_offsets(self.store)
        self._unsettled_from = None

    def retire(self, reason: str) -> None:
        """Refuse every later write (:class:`NotMaster`, which the doors answer as retriable):
        a replica about to lead rebuilds the table from the log into a new service, and this
        one's table (the slave's, from its start) must not register or end anything meanwhile."""
        with self._lock:
            self._retired = reason

    @property
    def retired(self) -> bool:
        """True once :meth:`retire` was called (a rebuilt service replaces this one)."""
        return self._retired is not None

    def _check_serving(self) -> None:
        """(Lock held.)"""
        if self._retired is not None:
            raise NotMaster(f"the transaction table is being rebuilt: {self._retired}; retry")

    def _complete_torn(self, tx: Transaction, missing: list[HalfRef]) -> None:
        end = self._end_records(tx, TxOutcome.COMMIT, 0, _runs_of(missing))
        self.store.append_encoded(end.records)
        self._table.end(tx, TxOutcome.COMMIT)

    # writes -------------------------------------------------------------------------------
    def register(
        self,
        transaction_id: str,
        producer_group: str,
        results: Sequence[PutResult],
        born_ms: int,
        real_topics: Sequence[str] | None = None,
        real_queue_ids: Sequence[int] | None = None,
    ) -> Transaction:
        """Record the halves just stored for ``transaction_id`` (idempotent). ``real_topics``
        (the halves' destinations) saves reading the halves back; without ``real_queue_ids``
        each one's REAL_QID is read at commit."""
        refs = []
        for i, result in enumerate(results):
            raw = self.store.read_record(result.commitlog_offset) if real_topics is None else None
            half = Half(raw, result.commitlog_offset) if raw is not None else None
            real_topic = real_topics[i] if real_topics is not None else half.real_topic if half else ""
            real_queue_id = (
                real_queue_ids[i]
                if real_queue_ids is not None
                else half.real_queue_id
                if half is not None
                else UNKNOWN_QUEUE
            )
            size = result.size_bytes
            refs.append(
                HalfRef(result.commitlog_offset, result.queue_offset, real_topic, real_queue_id, size)
            )
        with self._lock:
            self._check_serving()
            tx = self._table.get_or_add(transaction_id, producer_group, born_ms)
            for run in _runs_of(refs):
                self._table.add_run(tx, run)
            return tx

    def register_batch(
        self,
        transaction: HalfOf,
        result: BatchPutResult,
        real_topic: str,
        real_queue_ids: int | Sequence[int],
        keys: Sequence[str | None] | None = None,
    ) -> Transaction:
        """Record the halves a ``MessageStore.put_halves`` call stored (idempotent); ``keys``
        is the KEYS column it was given (the final messages' index entries), none if None."""
        n = len(result)
        run = HalfRun(
            result.commitlog_offsets.astype(np.int64),
            result.queue_offsets.astype(np.int64),
            result.sizes.astype(np.int64),
            real_topic,
            np.broadcast_to(np.asarray(real_queue_ids, dtype=np.int32), (n,)).copy(),
            uniq_keys=tuple(result.uniq_keys),
            keys=None if keys is None else tuple(keys),
        )
        with self._lock:
            self._check_serving()
            tx = self._table.get_or_add(
                transaction.transaction_id, transaction.producer_group, result.store_timestamp_ms
            )
            self._table.add_run(tx, run)
            return tx

    def put_offsets(self, transaction: HalfOf, entry: TxOffsets) -> Transaction:
        """Store consumer offsets as a half of ``transaction``: applied to the offset table in
        the same append as its commit's final messages, never if it rolls back."""
        host = (self.store.config.store_host, self.store.config.store_port)
        uniq_key = self.store.new_uniq_key()
        record = offsets_half_record(
            entry,
            half=transaction,
            uniq_key=uniq_key,
            born_ms=self.store.now_ms(),
            store_host=host,
        )
        try:
            (stored,) = self.store.append_records([record])
        except (FlushSlaveTimeout, FlushTimeout, SlaveNotAvailable) as exc:
            if not isinstance(exc, SlaveNotAvailable) or exc.appended:
                self._adopt_unacknowledged_offsets(transaction, uniq_key)
            raise
        return self._add_offsets_half(transaction, stored, stored.store_timestamp_ms)

    def _adopt_unacknowledged_offsets(self, transaction: HalfOf, uniq_key: str) -> None:
        """An offsets half stored but not acknowledged (its client retries with a new one) is
        still a half of the transaction: registered, its end names it too. Left out, a rebuild
        would find it later, open, and a repair could apply its offsets after newer ones."""
        found = self.store.get_by_uniq_key(TRANS_HALF_TOPIC, uniq_key)
        if found is not None:
            self._add_offsets_half(transaction, found, self.store.now_ms())

    def _add_offsets_half(
        self, transaction: HalfOf, stored: PutResult | MessageView, born_ms: int
    ) -> Transaction:
        ref = HalfRef(stored.commitlog_offset, stored.queue_offset, TRANS_OFFSETS_TOPIC, 0, stored.size_bytes)
        with self._lock:
            self._check_serving()
            tx = self._table.get_or_add(transaction.transaction_id, transaction.producer_group, born_ms)
            self._table.add_run(tx, HalfRun.of([ref]))
            return tx

    def end(
        self,
        transaction_id: str,
        outcome: TxOutcome,
        producer_group: str | None,
        *,
        check_times: int = 0,
    ) -> EndResult:
        """Commit, roll back or discard ``transaction_id`` once; later calls report the first
        outcome and write nothing."""
        (result,) = self.end_many([EndRequest(transaction_id, outcome, producer_group, check_times)])
        if isinstance(result, Exception):
            raise result
        return result

    def end_many(self, requests: Sequence[EndRequest]) -> list[EndResult | SparkMQError]:
        """End several transactions with **one** append (each one's final messages, then its op,
        in request order); each request gets its own result or refusal. Requests for the same
        transaction: the first decides, the others report its outcome. Offsets carried by the
        committed ones are applied right after the append, in log order."""
        with self._lock:
            self._check_serving()
            self._settle()
            out: list[EndResult | SparkMQError | None] = [None] * len(requests)
            parts: list[EncodedRecords] = []
            offsets: list[tuple[int, TxOffsets]] = []
            spans: list[tuple[int, Transaction, TxOutcome, int, int]] = []  # index, tx, outcome, lo, hi
            deciding: dict[str, TxOutcome] = {}
            count = 0
            for i, req in enumerate(requests):
                tx = self._table.get(req.transaction_id)
                if tx is None or not tx.runs:
                    out[i] = UnknownTransaction(f"no transaction {req.transaction_id!r}")
                    continue
                if req.producer_group is not None and req.producer_group != tx.producer_group:
                    out[i] = ProducerGroupMismatch(
                        f"transaction {req.transaction_id!r} belongs to producer group "
                        f"{tx.producer_group!r}, not {req.producer_group!r}"
                    )
                    continue
                first = tx.outcome or deciding.get(req.transaction_id)
                if first is not None:
                    out[i] = EndResult(tx, first, ended_now=False)
                    continue
                try:
                    end = self._end_records(tx, req.outcome, req.check_times, tx.runs)
                except SparkMQError as exc:
                    out[i] = exc
                    continue
                offsets.extend((count + index, entry) for index, entry in end.offsets)
                parts.append(end.records)
                deciding[req.transaction_id] = req.outcome
                spans.append((i, tx, req.outcome, count, count + len(end.records) - 1))
                count += len(end.records)
            if parts:
                records = EncodedRecords.concat(parts)
                before = self.store.commitlog_max_offset
                try:
                    stored = self.store.append_encoded(records)
                except (FlushSlaveTimeout, FlushTimeout, SlaveNotAvailable) as exc:
                    if not isinstance(exc, SlaveNotAvailable) or exc.appended:  # stored, not acked
                        unsettled = self._unsettled_from
                        self._unsettled_from = before if unsettled is None else min(unsettled, before)
                    raise
                every: list[PutResult] | None = None  # built once for the coalesced batch
                for i, tx, outcome, lo, hi in spans:
                    self._table.end(tx, outcome)
                    if outcome is TxOutcome.COMMIT and requests[i].want_results:
                        if every is None:
                            every = stored.results(records.topics)
                        tx.results = [r for r in every[lo:hi] if r.topic != TRANS_OFFSETS_TOPIC]
                    out[i] = EndResult(tx, outcome, ended_now=True)
                for index, entry in offsets:
                    self.store.apply_transaction_offsets(int(stored.queue_offsets[index]), entry)
            for i, result in enumerate(out):
                if result is None or (isinstance(result, EndResult) and not result.ended_now):
                    tx = self._table.get(requests[i].transaction_id)
                    assert tx is not None
                    out[i] = EndResult(
                        tx, tx.outcome or deciding[requests[i].transaction_id], ended_now=False
                    )
            return [r for r in out if r is not None]

    def _end_records(
        self, tx: Transaction, outcome: TxOutcome, check_times: int, runs: Sequence[HalfRun]
    ) -> _EndRecords:
        """Final messages (commit) or discard copies, then the op naming every half."""
        parts: list[EncodedRecords] = []
        offsets: list[tuple[int, TxOffsets]] = []
        count = 0
        for run in runs if outcome is not TxOutcome.ROLLBACK else ():
            if outcome is TxOutcome.DISCARD:
                parts.append(
                    EncodedRecords.of_fields([discard_record(h, check_times) for h in self._halves(tx, run)])
                )
            elif run.real_topic == TRANS_OFFSETS_TOPIC or len(run) <= SMALL_RUN:
                # One by one: offsets records (their bodies are read too), and short runs, where
                # the vectorised splice's fixed cost (a dozen Arrow kernels) exceeds the work.
                halves = self._halves(tx, run)
                if run.real_topic == TRANS_OFFSETS_TOPIC:
                    offsets.extend(
                        (count + i, parse_offsets_body(h.fields.body)) for i, h in enumerate(halves)
                    )
                parts.append(EncodedRecords.of_fields([final_record(h) for h in halves]))
            else:
                parts.append(self._finals(tx, run))
            count += len(run)
        parts.append(EncodedRecords.of_fields([self._op(tx, outcome)]))
        return _EndRecords(EncodedRecords.concat(parts), offsets)

    def _finals(self, tx: Transaction, run: HalfRun) -> EncodedRecords:
        """The final messages of a run, sliced from its stored bytes (one read when the halves
        are back to back)."""
        offsets = run.commitlog_offsets
        if run.back_to_back():
            raw = self.store.read_bytes(int(offsets[0]), int(offsets[-1] - offsets[0] + run.sizes[-1]))
            chunks = [] if raw is None else [raw]
            sizes = run.sizes
        else:
            chunks = [c for c in (self.store.read_record(o) for o in offsets.tolist()) if c is not None]
            sizes = np.fromiter(map(len, chunks), dtype=np.int64, count=len(chunks))
        if not chunks or len(sizes) != len(run):
            raise StoreError(f"transaction {tx.transaction_id!r}: a half at {int(offsets[0])}.. is gone")
        dispatch = None if run.uniq_keys is None else (run.uniq_keys, run.keys, run.tags)
        return final_records(b"".join(chunks), sizes, offsets, run.real_topic, run.real_queue_ids, dispatch)

    def _halves(self, tx: Transaction, run: HalfRun) -> list[Half]:
        halves = []
        for offset in run.commitlog_offsets.tolist():
            raw = self.store.read_record(offset)
            if raw is None:
                raise StoreError(f"transaction {tx.transaction_id!r}: half at {offset} is gone")
            halves.append(Half(raw, offset))
        return halves

    def _op(self, tx: Transaction, outcome: TxOutcome) -> RecordFields:
        host = (self.store.config.store_host, self.store.config.store_port)
        return op_record(
            tx.half_queue_offsets,
            transaction_id=tx.transaction_id,
            outcome=outcome,
            uniq_key=self.store.new_uniq_key(),
            born_ms=self.store.now_ms(),
            store_host=host,
        )

    # reads --------------------------------------------------------------------------------
    def get(self, transaction_id: str) -> Transaction | None:
        with self._lock:
            return self._table.get(transaction_id)

    def pending(self, producer_group: str | None = None) -> list[Transaction]:
        with self._lock:
            return [
                t
                for t in self._table.pending()
                if producer_group is None or t.producer_group == producer_group
            ]

    def transactions(self, producer_group: str | None = None) -> list[Transaction]:
        with self._lock:
            return [
                t for t in self._table.all() if producer_group is None or t.producer_group == producer_group
            ]


def _runs_of(refs: Sequence[HalfRef]) -> list[HalfRun]:
    """Consecutive halves grouped by real topic (each offsets record alone), in order."""
    groups: list[list[HalfRef]] = []
    for ref in refs:
        if groups and ref.real_topic == groups[-1][0].real_topic and ref.real_topic != TRANS_OFFSETS_TOPIC:
            groups[-1].append(ref)
        else:
            groups.append([ref])
    return [HalfRun.of(group) for group in groups]
