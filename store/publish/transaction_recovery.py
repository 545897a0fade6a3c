"""What the transaction service does when the store opens: rebuild, repair, re-apply.

1. **Rebuild** the table from the log: every half (``RMQ_SYS_TRANS_HALF_TOPIC``) joins its
   ``__transactionId__``; every op (``RMQ_SYS_TRANS_OP_HALF_TOPIC``) ends the transactions of the
   half queue offsets in its body, with the outcome in ``SPARKMQ_TX_END`` (commit when absent,
   as RocketMQ's ops mean "done").
2. **Repair torn commits.** The records of one append reach the disk in order, so a crash during
   a commit can keep a prefix of it: some final messages, not the rest, not the op. A COMMIT
   record after the last op whose ``preparedTransactionOffset`` names a half of an open
   transaction is the proof that the commit was decided; the missing final messages and the op
   are appended (one append), so the transaction ends complete, once.
3. **Re-apply transaction offsets** (``rmq_sys_trans_offsets``) that the persisted offset table
   does not hold yet: it is a snapshot written periodically, with the queue offset it is
   complete up to (``transactionOffsetsApplied``). Records are applied in queue order, before
   the broker serves anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from store.errors import InvalidArgument
from store.format.vocabulary import (
    PROPERTY_PGROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TX_END,
)
from store.message_store import MessageStore
from store.names import TRANS_HALF_TOPIC, TRANS_OFFSETS_TOPIC, TRANS_OP_HALF_TOPIC
from store.publish.transaction_table import HalfRef, HalfRun, Transaction, TransactionTable
from store.write.transactions import TxOutcome, parse_offsets_body, parse_op_body

log = logging.getLogger(__name__)

_READ_BATCH = 4096


def queue_rows(store: MessageStore, topic: str, start: int = 0) -> Iterator[dict[str, Any]]:
    """Every message of a (system) topic's queues from queue offset ``start``, as Arrow rows."""
    if topic not in store.topics(include_system=True):
        return
    for queue_id, (low, high) in sorted(store.queue_offsets(topic).items()):
        offset = max(low, start)
        while offset < high:
            got = store.read_batch(topic, queue_id, offset, _READ_BATCH)
            yield from got.batch.to_pylist()
            if got.next_offset <= offset:
                break
            offset = got.next_offset


def rebuild(store: MessageStore, table: TransactionTable) -> int:
    """Fill ``table`` from the half and op queues; returns the last op's CommitLog offset (-1)."""
    pending: list[HalfRef] = []  # consecutive halves of one transaction bound for one topic
    owner: Transaction | None = None
    for row in queue_rows(store, TRANS_HALF_TOPIC):
        props = dict(row["properties"] or ())
        txid = props.get(PROPERTY_TRANSACTION_ID) or str(row["uniq_key"] or "")
        born = row["born_timestamp"]
        born_ms = int(born.timestamp() * 1000) if born is not None else 0
        tx = table.get_or_add(txid, props.get(PROPERTY_PGROUP, ""), born_ms)
        real_qid = props.get(PROPERTY_REAL_QID, "0")
        ref = HalfRef(
            int(row["commitlog_offset"]),
            int(row["queue_offset"]),
            props.get(PROPERTY_REAL_TOPIC, ""),
            int(real_qid) if real_qid.isdigit() else 0,
        )
        joins = tx is owner and pending and pending[0].real_topic == ref.real_topic
        if not joins or ref.real_topic == TRANS_OFFSETS_TOPIC:
            if owner is not None and pending:
                table.add_run(owner, HalfRun.of(pending))
            owner, pending = tx, []
        pending.append(ref)
    if owner is not None and pending:
        table.add_run(owner, HalfRun.of(pending))
    last_op = -1
    _, by_queue_offset = table.open_halves()
    for row in queue_rows(store, TRANS_OP_HALF_TOPIC):
        props = dict(row["properties"] or ())
        last_op = max(last_op, int(row["commitlog_offset"]))
        try:
            outcome = TxOutcome(props.get(PROPERTY_TX_END, TxOutcome.COMMIT.value))
        except ValueError:
            outcome = TxOutcome.COMMIT
        for half_queue_offset in parse_op_body(bytes(row["body"] or b"")):
            ended = by_queue_offset.get(half_queue_offset)
            if ended is not None and ended.outcome is None:  # the first op decides
                table.end(ended, outcome)
    return last_op


def repair(
    store: MessageStore,
    table: TransactionTable,
    last_op_offset: int,
    complete: Callable[[Transaction, list[HalfRef]], None],
    what: str = "torn by a crash",
) -> int:
    """Find commits torn by a crash (``what`` says why they are incomplete, for the log) and
    ``complete(tx, halves without a final message)`` each; returns how many."""
    pending = table.pending()
    if not pending:
        return 0
    start = max(min(int(run.commitlog_offsets.min()) for t in pending for run in t.runs), last_op_offset)
    finalized: dict[str, set[int]] = {}
    torn: list[Transaction] = []
    by_offset, _ = table.open_halves()
    for _, half_offset in store.committed_half_offsets(start):
        tx = by_offset.get(half_offset)
        if tx is None:
            continue
        if tx.transaction_id not in finalized:
            finalized[tx.transaction_id] = set()
            torn.append(tx)
        finalized[tx.transaction_id].add(half_offset)
    for tx in torn:
        missing = [h for h in tx.halves if h.commitlog_offset not in finalized[tx.transaction_id]]
        log.warning(
            "transaction %s: its commit was %s (%d of %d final messages stored); "
            "appending the rest and its op",
            tx.transaction_id,
            what,
            tx.half_count - len(missing),
            tx.half_count,
        )
        complete(tx, missing)
    return len(torn)


def reapply_offsets(store: MessageStore) -> int:
    """Apply the committed transaction offsets the offset table's snapshot does not hold yet;
    returns how many records were applied."""
    applied = 0
    for row in queue_rows(store, TRANS_OFFSETS_TOPIC, store.transaction_offsets_applied):
        try:
            entry = parse_offsets_body(bytes(row["body"] or b""))
        except InvalidArgument as exc:
            log.error("rmq_sys_trans_offsets at %d is unreadable, skipped: %s", row["queue_offset"], exc)
            continue
        applied += store.apply_transaction_offsets(int(row["queue_offset"]), entry)
    if applied:
        log.warning("transactions: re-applied %d committed offsets record(s) missing from the table", applied)
    return applied
