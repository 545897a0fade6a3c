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

Crash repair: records of one append reach the disk in order, so a crash can keep the final
messages of an end and lose its op. :meth:`TransactionService.open` scans the CommitLog after the
last op for COMMIT records of halves without an op and appends the missing op (the final
message's ``preparedTransactionOffset`` is the provenance).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from store.errors import InvalidArgument, SparkMQError, StoreError
from store.format.record import RecordFields
from store.format.vocabulary import (
    PROPERTY_PGROUP,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TX_END,
)
from store.message_store import MessageStore
from store.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from store.types import PutResult
from store.write.transactions import (
    Half,
    TxOutcome,
    discard_record,
    final_record,
    op_record,
    parse_op_body,
)

log = logging.getLogger(__name__)

_READ_BATCH = 4096


class UnknownTransaction(SparkMQError):
    code = "unknown_transaction"


class ProducerGroupMismatch(InvalidArgument):
    """RocketMQ ``checkPrepareMessage``: the end names another producer group than the half."""

    code = "producer_group_mismatch"


@dataclass(frozen=True, slots=True)
class HalfRef:
    commitlog_offset: int
    queue_offset: int
    real_topic: str


@dataclass
class Transaction:
    transaction_id: str
    producer_group: str
    born_ms: int
    halves: list[HalfRef] = field(default_factory=list)
    outcome: TxOutcome | None = None
    #: Final messages of a commit ended by this broker process (not rebuilt after a restart).
    results: list[PutResult] = field(default_factory=list)
    #: Check-backs sent for it (kept by the check dispatcher; 0 after a restart).
    check_times: int = 0
    last_check_ms: int | None = None

    @property
    def topics(self) -> list[str]:
        return sorted({h.real_topic for h in self.halves})


@dataclass(frozen=True, slots=True)
class EndRequest:
    transaction_id: str
    outcome: TxOutcome
    producer_group: str | None
    check_times: int = 0


@dataclass(frozen=True, slots=True)
class EndResult:
    transaction: Transaction
    outcome: TxOutcome
    #: False when the transaction had ended already (the call changed nothing).
    ended_now: bool


class TransactionService:
    """The transaction table and the one place that ends transactions. Thread-safe."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._by_id: dict[str, Transaction] = {}
        self._by_half_offset: dict[int, Transaction] = {}  # half CommitLog offset -> transaction
        self._by_half_queue_offset: dict[int, Transaction] = {}
        self._last_op_commitlog_offset = -1
        self.repaired = 0

    @classmethod
    def open(cls, store: MessageStore) -> TransactionService:
        service = cls(store)
        service._rebuild()
        service.repaired = service._repair()
        return service

    # rebuild ------------------------------------------------------------------------------
    def _rows(self, topic: str) -> Iterator[dict[str, Any]]:
        if topic not in self.store.topics(include_system=True):
            return
        for queue_id, (low, high) in sorted(self.store.queue_offsets(topic).items()):
            offset = low
            while offset < high:
                got = self.store.read_batch(topic, queue_id, offset, _READ_BATCH)
                yield from got.batch.to_pylist()
                if got.next_offset <= offset:
                    break
                offset = got.next_offset

    def _rebuild(self) -> None:
        for row in self._rows(TRANS_HALF_TOPIC):
            props = dict(row["properties"] or ())
            txid = props.get(PROPERTY_TRANSACTION_ID) or str(row["uniq_key"] or "")
            born = row["born_timestamp"]
            born_ms = int(born.timestamp() * 1000) if born is not None else 0
            tx = self._by_id.get(txid)
            if tx is None:
                tx = self._by_id[txid] = Transaction(txid, props.get(PROPERTY_PGROUP, ""), born_ms)
            real_topic = props.get(PROPERTY_REAL_TOPIC, "")
            ref = HalfRef(int(row["commitlog_offset"]), int(row["queue_offset"]), real_topic)
            tx.halves.append(ref)
            self._by_half_offset[ref.commitlog_offset] = tx
            self._by_half_queue_offset[ref.queue_offset] = tx
        for row in self._rows(TRANS_OP_HALF_TOPIC):
            props = dict(row["properties"] or ())
            self._last_op_commitlog_offset = max(self._last_op_commitlog_offset, int(row["commitlog_offset"]))
            try:
                outcome = TxOutcome(props.get(PROPERTY_TX_END, TxOutcome.COMMIT.value))
            except ValueError:
                outcome = TxOutcome.COMMIT
            for half_queue_offset in parse_op_body(bytes(row["body"] or b"")):
                tx = self._by_half_queue_offset.get(half_queue_offset)
                if tx is not None and tx.outcome is None:
                    tx.outcome = outcome

    def _repair(self) -> int:
        """Append the op of a commit whose final messages were stored but whose op was not."""
        pending_offsets = [
            h.commitlog_offset for t in self._by_id.values() if t.outcome is None for h in t.halves
        ]
        if not pending_offsets:
            return 0
        start = max(min(pending_offsets), self._last_op_commitlog_offset)
        repaired = 0
        for _, half_offset in self.store.committed_half_offsets(start):
            tx = self._by_half_offset.get(half_offset)
            if tx is None or tx.outcome is not None:
                continue
            log.warning(
                "transaction %s: final message found without its op; appending the op", tx.transaction_id
            )
            self._append_op(tx, TxOutcome.COMMIT)
            tx.outcome = TxOutcome.COMMIT
            repaired += 1
        return repaired

    # writes -------------------------------------------------------------------------------
    def register(
        self,
        transaction_id: str,
        producer_group: str,
        results: Sequence[PutResult],
        born_ms: int,
        real_topics: Sequence[str] | None = None,
    ) -> Transaction:
        """Record the halves just stored for ``transaction_id`` (idempotent). ``real_topics``
        (the halves' destinations) saves reading the halves back."""
        with self._lock:
            tx = self._by_id.get(transaction_id)
            if tx is None:
                tx = self._by_id[transaction_id] = Transaction(transaction_id, producer_group, born_ms)
            known = {h.commitlog_offset for h in tx.halves}
            for i, result in enumerate(results):
                if result.commitlog_offset in known:
                    continue
                if real_topics is not None:
                    real_topic = real_topics[i]
                else:
                    raw = self.store.read_record(result.commitlog_offset)
                    real_topic = Half(raw, result.commitlog_offset).real_topic if raw is not None else ""
                ref = HalfRef(result.commitlog_offset, result.queue_offset, real_topic)
                tx.halves.append(ref)
                self._by_half_offset[ref.commitlog_offset] = tx
                self._by_half_queue_offset[ref.queue_offset] = tx
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
        transaction: the first decides, the others report its outcome."""
        with self._lock:
            out: list[EndResult | SparkMQError | None] = [None] * len(requests)
            records: list[RecordFields] = []
            spans: list[tuple[int, Transaction, TxOutcome, int, int]] = []  # index, tx, outcome, lo, hi
            deciding: dict[str, TxOutcome] = {}
            for i, req in enumerate(requests):
                tx = self._by_id.get(req.transaction_id)
                if tx is None or not tx.halves:
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
                    lo = len(records)
                    if req.outcome is TxOutcome.COMMIT:
                        records.extend(final_record(h) for h in self._halves(tx))
                    elif req.outcome is TxOutcome.DISCARD:
                        records.extend(discard_record(h, req.check_times) for h in self._halves(tx))
                    hi = len(records)
                    records.append(self._op(tx, req.outcome))
                except SparkMQError as exc:
                    del records[lo:]
                    out[i] = exc
                    continue
                deciding[req.transaction_id] = req.outcome
                spans.append((i, tx, req.outcome, lo, hi))
            if records:
                stored = self.store.append_records(records)
                self._last_op_commitlog_offset = stored[-1].commitlog_offset
                for i, tx, outcome, lo, hi in spans:
                    tx.outcome = outcome
                    if outcome is TxOutcome.COMMIT:
                        tx.results = stored[lo:hi]
                    out[i] = EndResult(tx, outcome, ended_now=True)
            for i, result in enumerate(out):
                if result is None or (isinstance(result, EndResult) and not result.ended_now):
                    tx = self._by_id[requests[i].transaction_id]
                    out[i] = EndResult(
                        tx, tx.outcome or deciding[requests[i].transaction_id], ended_now=False
                    )
            return [r for r in out if r is not None]

    def _halves(self, tx: Transaction) -> list[Half]:
        halves = []
        for ref in tx.halves:
            raw = self.store.read_record(ref.commitlog_offset)
            if raw is None:
                raise StoreError(
                    f"transaction {tx.transaction_id!r}: half at {ref.commitlog_offset} is gone (retention)"
                )
            halves.append(Half(raw, ref.commitlog_offset))
        return halves

    def _op(self, tx: Transaction, outcome: TxOutcome) -> RecordFields:
        host = (self.store.config.store_host, self.store.config.store_port)
        return op_record(
            [h.queue_offset for h in tx.halves],
            transaction_id=tx.transaction_id,
            outcome=outcome,
            uniq_key=self.store.new_uniq_key(),
            born_ms=self.store.now_ms(),
            store_host=host,
        )

    def _append_end(self, tx: Transaction, outcome: TxOutcome, check_times: int) -> list[PutResult]:
        records: list[RecordFields] = []
        if outcome is TxOutcome.COMMIT:
            records = [final_record(h) for h in self._halves(tx)]
        elif outcome is TxOutcome.DISCARD:
            records = [discard_record(h, check_times) for h in self._halves(tx)]
        records.append(self._op(tx, outcome))
        stored = self.store.append_records(records)
        self._last_op_commitlog_offset = stored[-1].commitlog_offset
        return stored[:-1]

    def _append_op(self, tx: Transaction, outcome: TxOutcome) -> None:
        stored = self.store.append_records([self._op(tx, outcome)])
        self._last_op_commitlog_offset = stored[-1].commitlog_offset

    # reads --------------------------------------------------------------------------------
    def get(self, transaction_id: str) -> Transaction | None:
        with self._lock:
            return self._by_id.get(transaction_id)

    def pending(self, producer_group: str | None = None) -> list[Transaction]:
        with self._lock:
            return [
                t
                for t in self._by_id.values()
                if t.outcome is None
                and t.halves
                and (producer_group is None or t.producer_group == producer_group)
            ]

    def transactions(self, producer_group: str | None = None) -> list[Transaction]:
        with self._lock:
            return [
                t
                for t in self._by_id.values()
                if producer_group is None or t.producer_group == producer_group
            ]
