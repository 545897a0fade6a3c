"""When the transaction coordinator's state is (re)built: at start, and on a promotion.

The coordinator's state is records of ``rmq_sys_KAFKA_TXN_STATE`` (:mod:`ingest_api.kafka.txn_log`),
replicated like messages. A gateway replays them before it serves (:func:`recover_at_start`).
In a replica group the slave's gateway does the same at its start, but its master keeps
writing; so when the slave is promoted, :func:`follow_promotions` replays the topic again
(it now holds every record the old master had acknowledged, and with ``--replication sync``
every one it acknowledged) into a new coordinator, together with the transaction service the
broker rebuilt from the replicated log, and only then serves the transactional ids again:
until the replay is done they answer NOT_COORDINATOR, which Kafka clients retry.

Only a member that serves (its group's master; any broker outside a replica group) aborts
orphaned transactions and delivers decided ends; a slave leaves them to its master, and to
itself once promoted.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import replace

from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.handlers.transactions import recover_transactions
from ingest_api.kafka.txn_cluster import start_retries
from ingest_api.kafka.txn_cluster_recovery import PendingEnd
from ingest_api.kafka.txn_record import TxnTables
from store import SparkMQError
from store.publish import TransactionService

log = logging.getLogger(__name__)

#: How long a promotion waits for the replay (the node worker thread is held meanwhile).
PROMOTION_RELOAD_TIMEOUT_S = 60.0


def serving(ctx: GatewayContext) -> bool:
    """Whether this member writes: a lone broker, a cluster broker, a replica group's master."""
    return ctx.cluster is None or ctx.cluster.node.serving


async def recover_at_start(ctx: GatewayContext) -> None:
    """Replay the state topic into ``ctx`` (before the gateway serves); from then on the live
    state is written again before retention deletes its records (:func:`stop_keeping`)."""
    staged, pending = await ctx.run_blocking(recover_transactions, ctx)
    ctx.adopt_txn_state(staged)
    _deliver(ctx, pending)
    ctx.retention_keeper = functools.partial(_keep_before, ctx)
    ctx.txn_log.store.add_retention_listener(ctx.retention_keeper)


def stop_keeping(ctx: GatewayContext) -> None:
    """The gateway closes: retention no longer asks it (the store outlives it)."""
    if ctx.retention_keeper is not None:
        ctx.txn_log.store.remove_retention_listener(ctx.retention_keeper)
        ctx.retention_keeper = None


def live_tables(ctx: GatewayContext) -> TxnTables:
    """The coordinator's state as it is now (call under ``ctx.txn_log.lock``)."""
    ledger = {e.transaction_id: e for e in ctx.ledger.entries()} if ctx.ledger is not None else {}
    return TxnTables(ctx.producer_ids.blocks(), ctx.transactional_ids.all(), ledger)


def _keep_before(ctx: GatewayContext, end: int) -> None:
    """Store retention listener (its thread): the live state again before ``end`` goes."""
    try:
        ctx.txn_log.keep_before(end, lambda: live_tables(ctx))
    except SparkMQError as exc:  # a slave: its master's rewrite is replicated to it
        log.warning("Kafka transaction state not written again before offset %d: %s", end, exc)


async def reload_transactions(ctx: GatewayContext, service: TransactionService | None) -> None:
    """A promoted member: replay the state topic with ``service`` (the transaction service the
    broker rebuilt from the replicated log; ``None``: keep the gateway's) and serve it."""
    ctx.txn_loading = True
    try:
        source = ctx if service is None else replace(ctx, transactions=service)
        staged, pending = await ctx.run_blocking(recover_transactions, source)
        ctx.adopt_txn_state(staged)
        log.warning(
            "Kafka transaction coordinator rebuilt on promotion: %d transactional ids, %d ends to deliver",
            len(staged.transactional_ids.all()),
            len(pending),
        )
        _deliver(ctx, pending)
    finally:
        ctx.txn_loading = False


def _deliver(ctx: GatewayContext, pending: list[PendingEnd]) -> None:
    """Start delivering decided ends again (a member that serves only)."""
    if not serving(ctx):
        return
    for end in pending:
        start_retries(ctx, end.transactional_id, end.transaction_id, end.commit, set(end.brokers), [])


async def catch_up_promotion(ctx: GatewayContext, service: TransactionService | None) -> bool:
    """Call once the listeners are attached (:func:`stop_serving_before_promotion`,
    :func:`follow_promotions`): a lead that began while the gateway started, before they were
    (a replica group founded during the broker's start-up), retired the transaction service
    the gateway took, and its rebuilt ``service`` came before this gateway listened. Replay
    with it now; True when that was needed. Without this the founding master refused every
    transactional Produce (``the transaction table is being rebuilt``) for its whole epoch."""
    if service is None or ctx.transactions is service or ctx.txn_loading:
        return False
    if not ctx.transactions.retired:
        return False
    log.warning("Kafka gateway: this member began to lead while the gateway started; replaying its state")
    await reload_transactions(ctx, service)
    return True


def stop_serving_before_promotion(ctx: GatewayContext) -> Callable[[int], None]:
    """The listener to add to ``ReplicaGroup.on_lead_begin``: from before this member takes
    writes until :func:`follow_promotions` has replayed the state, transactional requests are
    refused (NOT_COORDINATOR, and NOT_LEADER_OR_FOLLOWER for a transactional Produce), all
    retriable. Served from the slave's stale coordinator, a Produce was given a transaction id
    already used (its halves joined a transaction another master had committed) and an EndTxn
    could end a transaction again (the Jepsen run's outputs twice and missing)."""

    def begin(epoch: int) -> None:
        ctx.txn_loading = True

    return begin


def follow_promotions(
    ctx: GatewayContext, service_of: Callable[[], TransactionService | None]
) -> Callable[[int], None]:
    """The listener to add to ``ReplicaGroup.on_lead`` (after the broker's own, which rebuilds
    the transaction service ``service_of`` returns). It runs on the node's worker thread and
    returns once the coordinator is rebuilt (raises if that fails or takes too long)."""

    def promoted(epoch: int) -> None:
        ctx.txn_loading = True  # at once: requests arriving meanwhile answer NOT_COORDINATOR
        future = asyncio.run_coroutine_threadsafe(reload_transactions(ctx, service_of()), ctx.loop)
        try:
            future.result(PROMOTION_RELOAD_TIMEOUT_S)
        except BaseException:
            ctx.txn_loading = False
            raise
        log.info("epoch %d: Kafka transaction state replayed", epoch)

    return promoted
