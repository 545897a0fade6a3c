"""Kafka transactions: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions; the broker's abort of timed-out
transactions; and the recovery at start (TxnOffsetCommit: :mod:`ingest_api.kafka.handlers.txn_offsets`).

A Kafka transaction is a sparkmq transaction (docs/transactions.md, "Kafka transactions"): its
records are halves (:mod:`ingest_api.kafka.handlers.produce`), its TxnOffsetCommits one
offsets half each (``TransactionService.put_offsets``), and EndTxn is the service's atomic,
idempotent end: commit = final messages + offsets record + op in one append, the offsets then
applied to the group's offsetTable; abort = the op only. The state machine is
:mod:`ingest_api.kafka.txn_coordinator`; every request here holds its transactional id's lock
around decide + I/O + done, and the producer id's lock around the end itself, so no Produce of
that producer is half-way through while its transaction ends.

In a cluster only the transaction's coordinator serves the control APIs (others answer
NOT_COORDINATOR), partitions and offsets may live on other brokers, and ends reach every
broker that holds part of the transaction (:mod:`ingest_api.kafka.txn_cluster`).
"""

from __future__ import annotations

import logging
from typing import Any

from ingest_api.kafka import codec, txn_cluster
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.base import Connection, not_coordinator
from ingest_api.kafka.handlers.topics import known_partition_error
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.txn_cluster import After
from ingest_api.kafka.txn_cluster_recovery import PendingEnd, recover_cluster
from ingest_api.kafka.txn_coordinator import MAX_PRODUCER_EPOCH, PREPARING, TxnEntry, TxnState
from ingest_api.kafka.txn_record import DurableId
from ingest_api.kafka.txn_state import recover
from ingest_api.kafka.versions import PRODUCER_FENCED_SINCE, ApiKey
from store import SparkMQError
from store.publish import HalfOf, TxOutcome

log = logging.getLogger(__name__)


def fenced(api_key: ApiKey, version: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED for versions that know it, INVALID_PRODUCER_EPOCH before (KIP-588)."""
    if error == ErrorCode.PRODUCER_FENCED and version < PRODUCER_FENCED_SINCE.get(api_key, 1 << 15):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def half_of(entry: TxnEntry, sparkmq_id: str) -> HalfOf:
    return txn_cluster.half_of(entry.transactional_id, sparkmq_id, entry.timeout_ms)


async def _end(
    ctx: GatewayContext, entry: TxnEntry, sparkmq_id: str, commit: bool, after: After | None = None
) -> bool | None:
    """End the sparkmq transaction everywhere it has halves; whether it committed, or ``None``
    while an end is still being delivered to a participant (then ``after`` runs once it is)."""
    return await txn_cluster.end_everywhere(ctx, entry, sparkmq_id, commit, after)


def _elsewhere(ctx: GatewayContext, transactional_id: str) -> bool:
    return not_coordinator(ctx, transactional_id, CoordinatorKind.TRANSACTION)


async def _new_epoch(ctx: GatewayContext, entry: TxnEntry | None) -> tuple[int, int]:
    if entry is not None and entry.epoch < MAX_PRODUCER_EPOCH:
        return entry.producer_id, entry.epoch + 1
    return await ctx.run_blocking(ctx.producer_ids.allocate), 0


# --- InitProducerId ------------------------------------------------------------------------------
async def init_transactional(ctx: GatewayContext, request: KafkaRequest) -> bytes:
    """InitProducerId with a transactional id: abort its ongoing transaction, bump the epoch
    (fencing every older producer), persist, answer."""
    body = request.body
    tid, timeout_ms = str(body.transactional_id), int(body.transaction_timeout_ms)
    given_id, given_epoch = getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1)

    def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> bytes:
        error = fenced(ApiKey.INIT_PRODUCER_ID, request.api_version, error)
        return codec.encode_response(
            request, throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch
        )

    if _elsewhere(ctx, tid):
        return answer(ErrorCode.NOT_COORDINATOR)
    async with ctx.txn_lock(tid):
        plan = ctx.txn.plan_init(tid, timeout_ms, given_id, given_epoch)
        if plan.error != ErrorCode.NONE:
            return answer(plan.error)
        entry = ctx.txn.get(tid)
        if plan.abort is not None and entry is not None:
            try:
                aborted = await _end(ctx, entry, plan.abort, commit=False)
            except SparkMQError:
                log.exception("InitProducerId %r: aborting %s failed", tid, plan.abort)
                ctx.txn.end_done(tid, None)
                return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            if aborted is None:  # the abort still has to reach a participant: retry later
                return answer(ErrorCode.CONCURRENT_TRANSACTIONS)
        try:
            if plan.new_producer_id:
                producer_id, epoch = await ctx.run_blocking(ctx.producer_ids.allocate), 0
            else:
                producer_id, epoch = plan.producer_id, plan.epoch
            last_epoch = entry.epoch if entry is not None and entry.producer_id == producer_id else -1
            await ctx.run_blocking(
                ctx.transactional_ids.save, tid, DurableId(producer_id, epoch, last_epoch, timeout_ms)
            )
        except SparkMQError as exc:  # its state record not acknowledged: the client retries
            log.warning("InitProducerId %r: the new epoch is not stored: %s", tid, exc)
            if plan.abort is not None:
                ctx.txn.end_done(tid, False)  # the abort itself is done
            return answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        ctx.txn.init_done(tid, producer_id, epoch, timeout_ms)
    return answer(ErrorCode.NONE, producer_id, epoch)


# --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------------------
async def handle_add_partitions_to_txn(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    tid = str(body.v3_and_below_transactional_id)
    producer_id, epoch = body.v3_and_below_producer_id, body.v3_and_below_producer_epoch
    wanted = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]

    def check_all() -> list[ErrorCode]:
        return [known_partition_error(ctx, topic, partition) for topic, partition in wanted]

    errors = await ctx.run_blocking(check_all)
    if _elsewhere(ctx, tid):
        errors = [ErrorCode.NOT_COORDINATOR] * len(wanted)
    elif any(e != ErrorCode.NONE for e in errors):  # Kafka: the unknown ones, the rest not attempted
        errors = [ErrorCode.OPERATION_NOT_ATTEMPTED if e == ErrorCode.NONE else e for e in errors]
    else:
        async with ctx.txn_lock(tid):
            error = ctx.txn.add_partitions(tid, producer_id, epoch, wanted)
            entry = ctx.txn.get(tid)
            if error == ErrorCode.NONE and entry is not None:
                error = await txn_cluster.enlist(ctx, entry, wanted)
        errors = [fenced(ApiKey.ADD_PARTITIONS_TO_TXN, request.api_version, error)] * len(wanted)
    cls = codec.response_class(ApiKey.ADD_PARTITIONS_TO_TXN)
    topic_cls = cls.AddPartitionsToTxnTopicResult
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in zip(wanted, errors, strict=True):
        by_topic.setdefault(topic, []).append(
            topic_cls.AddPartitionsToTxnPartitionResult(partition_index=partition, partition_error_code=error)
        )
    results = [topic_cls(name=name, results_by_partition=parts) for name, parts in by_topic.items()]
    return codec.encode_response(request, throttle_time_ms=0, results_by_topic_v3_and_below=results)


async def handle_add_offsets_to_txn(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    tid = str(body.transactional_id)
    if _elsewhere(ctx, tid):
        return codec.encode_response(request, throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
    async with ctx.txn_lock(tid):
        error = ctx.txn.add_offsets(tid, body.producer_id, body.producer_epoch, str(body.group_id))
    error = fenced(ApiKey.ADD_OFFSETS_TO_TXN, request.api_version, error)
    return codec.encode_response(request, throttle_time_ms=0, error_code=error)


# --- EndTxn ----------------------------------------------------------------------------------------
async def handle_end_txn(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    tid, commit = str(body.transactional_id), bool(body.committed)
    if _elsewhere(ctx, tid):
        return codec.encode_response(request, throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
    async with ctx.txn_lock(tid):
        error, sparkmq_id = ctx.txn.plan_end(tid, body.producer_id, body.producer_epoch, commit)
        entry = ctx.txn.get(tid)
        if error == ErrorCode.NONE and sparkmq_id is not None and entry is not None:
            try:
                committed = await _end(ctx, entry, sparkmq_id, commit)
            except SparkMQError:
                log.exception("EndTxn of %r (%s) failed; the transaction stays open", tid, sparkmq_id)
                ctx.txn.end_done(tid, None)
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                # None: decided and durable, still being delivered to a participant (Kafka
                # answers once the decision is logged, and writes its markers afterwards).
                if committed is not None:
                    ctx.txn.end_done(tid, committed)
                if committed is not None and committed != commit:  # ended before, another way
                    error = ErrorCode.INVALID_TXN_STATE
    error = fenced(ApiKey.END_TXN, request.api_version, error)
    return codec.encode_response(request, throttle_time_ms=0, error_code=error)


# --- the broker's own aborts -----------------------------------------------------------------------
async def abort_expired(ctx: GatewayContext, transactional_id: str, sparkmq_id: str) -> None:
    """Abort a transaction past its ``transaction.timeout.ms`` and fence its producer (Kafka
    bumps the epoch too): the producer's next request is PRODUCER_FENCED."""
    async with ctx.txn_lock(transactional_id):
        entry = ctx.txn.get(transactional_id)
        if entry is None or entry.state is not TxnState.ONGOING or entry.transaction_id != sparkmq_id:
            return  # ended meanwhile
        log.warning(
            "transaction %s of %r timed out after %d ms: aborting",
            sparkmq_id,
            transactional_id,
            entry.timeout_ms,
        )
        ctx.txn.plan_end(transactional_id, entry.producer_id, entry.epoch, commit=False)

        async def fence() -> None:
            try:
                producer_id, epoch = await _new_epoch(ctx, entry)
                last_epoch = entry.epoch if producer_id == entry.producer_id else -1
                await ctx.run_blocking(
                    ctx.transactional_ids.save,
                    transactional_id,
                    DurableId(producer_id, epoch, last_epoch, entry.timeout_ms, TxnState.COMPLETE_ABORT),
                )
            except SparkMQError as exc:  # aborted, not fenced: its next EndTxn finds nothing open
                log.warning("fencing %r after its timeout failed: %s", transactional_id, exc)
                ctx.txn.end_done(transactional_id, False)
                return
            ctx.txn.fence_done(transactional_id, producer_id, epoch)

        try:
            aborted = await _end(ctx, entry, sparkmq_id, commit=False, after=fence)
        except SparkMQError:
            log.exception("aborting timed-out transaction %s failed; retrying later", sparkmq_id)
            ctx.txn.end_done(transactional_id, None)
            return
        if aborted is not None:  # else the fence follows once every participant has aborted
            await fence()


def recover_transactions(ctx: GatewayContext) -> tuple[GatewayContext, list[PendingEnd]]:
    """Blocking: replay the state topic into a new coordinator, and abort orphaned
    transactions; in a cluster also the decided ends still to deliver (start them on the loop).
    Returns the staged context (take it with ``ctx.adopt_txn_state``) and those ends. Run
    before serving, and when a replica group's slave is promoted (``ctx.transactions`` then
    being the service rebuilt from the replicated log)."""
    staged = ctx.with_txn_tables(ctx.txn_log.load())
    orphans = recover(staged.txn, staged.transactional_ids, staged.transactions)
    pending: list[PendingEnd] = []
    if staged.cluster is not None:
        orphans, pending = recover_cluster(staged, orphans)
    for sparkmq_id in orphans:
        tx = staged.transactions.get(sparkmq_id)
        if tx is None:
            continue
        log.warning("transaction %s has no current producer epoch: aborting it", sparkmq_id)
        try:
            staged.transactions.end(sparkmq_id, TxOutcome.ROLLBACK, tx.producer_group)
        except SparkMQError as exc:  # a replica group's slave: the master (or this one, promoted) ends it
            log.warning("transaction %s left open: %s", sparkmq_id, exc)
    return staged, pending


# --- DescribeTransactions / ListTransactions -------------------------------------------------------
async def handle_describe_transactions(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    cls = codec.response_class(ApiKey.DESCRIBE_TRANSACTIONS)
    state_cls = cls.TransactionState
    states = []
    for tid in request.body.transactional_ids:
        entry = ctx.txn.get(tid)
        elsewhere = _elsewhere(ctx, tid)
        if entry is None or elsewhere:
            missing = ErrorCode.NOT_COORDINATOR if elsewhere else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
            states.append(
                state_cls(
                    error_code=missing,
                    transactional_id=tid,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        ongoing = entry.state in (TxnState.ONGOING, *PREPARING)
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(entry.partitions if ongoing else ()):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            state_cls(
                error_code=ErrorCode.NONE,
                transactional_id=tid,
                transaction_state=entry.state.value,
                transaction_timeout_ms=entry.timeout_ms,
                transaction_start_time_ms=entry.started_ms if ongoing else -1,
                producer_id=entry.producer_id,
                producer_epoch=entry.epoch,
                topics=[state_cls.TopicData(topic=t, partitions=p) for t, p in by_topic.items()],
            )
        )
    return codec.encode_response(request, throttle_time_ms=0, transaction_states=states)


async def handle_list_transactions(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    known = {s.value for s in TxnState}
    wanted_states = set(body.state_filters) & known
    wanted_ids = set(body.producer_id_filters)
    duration = getattr(body, "duration_filter", -1)
    now = ctx.txn.now_ms()
    cls = codec.response_class(ApiKey.LIST_TRANSACTIONS)
    rows = [
        cls.TransactionState(
            transactional_id=e.transactional_id, producer_id=e.producer_id, transaction_state=e.state.value
        )
        for e in ctx.txn.entries()
        if not _elsewhere(ctx, e.transactional_id)
        and (not wanted_states or e.state.value in wanted_states)
        and (not wanted_ids or e.producer_id in wanted_ids)
        and (duration < 0 or (e.state is TxnState.ONGOING and now - e.started_ms > duration))
    ]
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        unknown_state_filters=sorted(set(body.state_filters) - known),
        transaction_states=rows,
    )
