"""Kafka transactions whose partitions span brokers: the coordinator's side.

A transaction is one sparkmq transaction id ``kafka-<producer id>-<epoch>-<n>`` on every broker
that holds part of it. The transaction coordinator (FindCoordinator's choice for the
transactional id, :mod:`ingest_api.kafka.topology`) keeps deciding alone, as on a lone broker
(:mod:`ingest_api.kafka.txn_coordinator`); what spans brokers is this:

1. **Enlisting** (AddPartitionsToTxn, or transactional offsets for a queue owned elsewhere): the
   owner brokers are written to the ledger (:mod:`ingest_api.kafka.txn_ledger`, fsynced) and
   then told which transaction is open (``txn-participant``), before the producer is answered.
   Each partition leader stores its records as halves of that transaction
   (:mod:`ingest_api.kafka.txn_participants`; a participant that missed the call, e.g. after a
   restart, asks the coordinator: ``txn-state``).
2. **Ending** (EndTxn, the abort of InitProducerId or of a timeout): the decision is written to
   the ledger first, then every participant ends its halves (``txn-end``: the store's atomic,
   idempotent end, one append per broker) and the coordinator ends its own. When all have
   answered, the ledger entry goes. A participant that cannot be reached is retried in the
   background, with backoff, until it answers — after a restart of the coordinator too (the
   ledger is re-read at start). Meanwhile the transactional id stays PrepareCommit/PrepareAbort:
   its next transaction gets CONCURRENT_TRANSACTIONS (clients retry), exactly as Kafka does
   while its commit markers are not all written, so no participant can ever hold halves of two
   open transactions of one producer.
3. **Consumer offsets** of ``send_offsets_to_transaction`` land where the group's offsets live,
   at each queue's owner: the group coordinator hands the offsets to the transaction
   coordinator (``txn-offsets``), which enlists each owner and has it write an offsets half of
   the transaction (``txn-offsets-half``); the owner's end applies them.

Exactly-once: each broker's part is ended by its store's idempotent end, so however often an
end is repeated, each half becomes a final message at most once, and the decision, once in the
ledger, is the only outcome any broker is asked for. Every function here runs on the gateway's
loop with the transactional id's lock held by its caller.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Iterable

from cluster import QueueUnavailable
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.names import to_store
from ingest_api.kafka.peer_messages import EndAnswer, EndMsg, MirrorMsg, OffsetsHalfMsg
from ingest_api.kafka.txn_coordinator import PREPARING, TxnEntry
from ingest_api.kafka.txn_participants import Mirror
from ingest_api.kafka.txn_state import producer_group
from store import SparkMQError
from store.publish import EndRequest, HalfOf, TxOffsets, TxOutcome, UnknownTransaction

log = logging.getLogger(__name__)

#: Added to ``transaction.timeout.ms`` for the halves' CHECK_IMMUNITY_TIME_IN_SECONDS on the
#: coordinator: the Spark transaction resolver never checks a Kafka transaction before the
#: gateway's timeout could abort it.
CHECK_GRACE_S = 60
#: On a participant, halves wait this much longer for their coordinator's decision before the
#: resolver may check (and after --tx-check-max checks, discard) them: a coordinator down for
#: longer than that, with a commit decided and not yet delivered, loses atomicity.
PARTICIPANT_GRACE_S = 3600
#: Backoff of the background retries of undelivered ends (seconds).
RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0

After = Callable[[], Awaitable[None]]
_OUTCOMES = {TxOutcome.COMMIT: "commit", TxOutcome.ROLLBACK: "rollback", TxOutcome.DISCARD: "discard"}


def half_of(transactional_id: str, transaction_id: str, timeout_ms: int, participant: bool = False) -> HalfOf:
    immunity_s = math.ceil(timeout_ms / 1000) + CHECK_GRACE_S + (PARTICIPANT_GRACE_S if participant else 0)
    return HalfOf(producer_group(transactional_id), transaction_id, immunity_s)


def mirror_of(ctx: GatewayContext, entry: TxnEntry) -> Mirror:
    assert ctx.cluster is not None
    return Mirror(
        entry.transactional_id,
        entry.producer_id,
        entry.epoch,
        entry.sequence,
        entry.timeout_ms,
        ctx.cluster.me,
    )


# --- enlisting -----------------------------------------------------------------------------------
async def enlist(ctx: GatewayContext, entry: TxnEntry, partitions: Iterable[tuple[str, int]]) -> ErrorCode:
    """Make the owners of ``partitions`` participants of ``entry``'s open transaction: in the
    ledger (durably), then told. A broker that cannot be told now learns it when it asks."""
    link, ledger = ctx.cluster, ctx.ledger
    if link is None or ledger is None:
        return ErrorCode.NONE
    wanted = set(partitions)
    owners = {owner for topic, q in wanted if (owner := link.owner(topic, q)) is not None} - {link.me}
    if not owners:
        return ErrorCode.NONE
    txid = entry.transaction_id
    known = ledger.get(txid)
    new = owners - (known.participants if known is not None else frozenset())
    try:
        await ctx.run_blocking(ledger.add, txid, entry.transactional_id, owners, wanted)
    except (OSError, SparkMQError):
        log.exception("transaction %s: recording participants %s failed", txid, sorted(new))
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    message = MirrorMsg.of(mirror_of(ctx, entry))

    async def tell(broker: str) -> None:
        try:
            await link.peer(broker, "txn-participant", message)
        except QueueUnavailable as exc:
            log.info("transaction %s: %s learns of it later: %s", txid, broker, exc)

    await asyncio.gather(*(tell(broker) for broker in sorted(new)))
    return ErrorCode.NONE


async def write_offsets(
    ctx: GatewayContext, entry: TxnEntry, group: str, commits: list[tuple[str, int, int]]
) -> ErrorCode:
    """The transactional offsets of ``group`` as offsets halves of ``entry``'s transaction, at
    each queue's owner (this broker's part directly)."""
    link = ctx.cluster
    assert link is not None
    by_owner: dict[str, list[tuple[str, int, int]]] = {}
    for topic, partition, offset in commits:
        owner = link.owner(topic, partition)
        if owner is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        by_owner.setdefault(owner, []).append((topic, partition, offset))
    error = await enlist(ctx, entry, [(t, p) for t, p, _ in commits])
    if error != ErrorCode.NONE:
        return error
    mirror = MirrorMsg.of(mirror_of(ctx, entry))
    half = half_of(entry.transactional_id, entry.transaction_id, entry.timeout_ms)

    async def to_owner(owner: str, part: list[tuple[str, int, int]]) -> ErrorCode:
        if owner == link.me:
            return await put_offsets_half(ctx, half, entry.producer_id, group, part)
        try:
            answer = await link.peer(owner, "txn-offsets-half", OffsetsHalfMsg(mirror, group, part))
        except QueueUnavailable as exc:
            log.info("transactional offsets of %r for %s: %s", group, entry.transaction_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode(answer.error)

    errors = await asyncio.gather(*(to_owner(owner, part) for owner, part in by_owner.items()))
    return next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)


async def put_offsets_half(
    ctx: GatewayContext, half: HalfOf, producer_id: int, group: str, commits: list[tuple[str, int, int]]
) -> ErrorCode:
    """One offsets half of ``half``'s transaction in the local store."""
    offsets: dict[str, dict[int, int]] = {}
    for topic, partition, offset in commits:
        offsets.setdefault(to_store(topic), {})[partition] = offset
    try:
        async with ctx.producer_lock(producer_id):
            await ctx.run_blocking(ctx.transactions.put_offsets, half, TxOffsets(to_store(group), offsets))
    except SparkMQError:
        log.exception("transactional offsets of group %r for %s failed", group, half.transaction_id)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.NONE


# --- ending --------------------------------------------------------------------------------------
async def end_local(ctx: GatewayContext, producer_id: int, request: EndRequest) -> str | None:
    """End this store's halves of a transaction under the producer's lock: how they ended
    (``commit``/``rollback``/``discard``), ``None`` when there were none. Raises on a store fault."""
    async with ctx.producer_lock(producer_id):
        (ended,) = await ctx.run_blocking(ctx.transactions.end_many, [request])
    if isinstance(ended, UnknownTransaction):
        return None
    if isinstance(ended, Exception):
        raise ended
    return _OUTCOMES[ended.outcome]


def end_request(transactional_id: str, transaction_id: str, commit: bool) -> EndRequest:
    outcome = TxOutcome.COMMIT if commit else TxOutcome.ROLLBACK
    return EndRequest(transaction_id, outcome, producer_group(transactional_id), want_results=False)


async def end_everywhere(
    ctx: GatewayContext, entry: TxnEntry, transaction_id: str, commit: bool, after: After | None = None
) -> bool | None:
    """End the transaction on every broker that holds part of it. Returns whether it committed,
    or ``None`` when a participant could not be reached now: the decision is durable and the
    end is delivered in the background, which then completes the entry and runs ``after``.
    Raises :class:`SparkMQError` when the local end (or the decision's write) fails."""
    request = end_request(entry.transactional_id, transaction_id, commit)
    recorded = ctx.ledger.get(transaction_id) if ctx.ledger is not None else None
    if ctx.cluster is None or recorded is None:
        outcome = await end_local(ctx, entry.producer_id, request)
        return commit if outcome is None else outcome == "commit"
    await ctx.run_blocking(ctx.ledger.decide, transaction_id, commit)  # type: ignore[union-attr]
    brokers = {*recorded.participants, ctx.cluster.me}
    remaining, outcomes = await _deliver(ctx, entry.transactional_id, transaction_id, commit, brokers)
    if remaining:
        start_retries(ctx, entry.transactional_id, transaction_id, commit, remaining, outcomes, after)
        return None
    await ctx.run_blocking(ctx.ledger.forget, transaction_id)  # type: ignore[union-attr]
    return _committed(transaction_id, commit, outcomes)


async def _deliver(
    ctx: GatewayContext,
    transactional_id: str,
    transaction_id: str,
    commit: bool,
    brokers: set[str],
    attempt: int = 1,
) -> tuple[set[str], list[str | None]]:
    """One attempt at every broker; the brokers still to do and the outcomes received."""
    link = ctx.cluster
    assert link is not None
    request = end_request(transactional_id, transaction_id, commit)
    producer_id = int(transaction_id.split("-")[1])

    async def one(broker: str) -> str | None:
        if broker == link.me:
            return await end_local(ctx, producer_id, request)
        answer: EndAnswer = await link.peer(
            broker, "txn-end", EndMsg(transactional_id, transaction_id, commit)
        )
        return answer.outcome

    names = sorted(brokers)
    results = await asyncio.gather(*(one(b) for b in names), return_exceptions=True)
    remaining: set[str] = set()
    outcomes: list[str | None] = []
    for broker, result in zip(names, results, strict=True):
        if isinstance(result, BaseException):
            if not isinstance(result, Exception):
                raise result  # cancelled: the decision stays in the ledger
            if not isinstance(result, (QueueUnavailable, SparkMQError)):
                log.error("transaction %s: end at %s failed", transaction_id, broker, exc_info=result)
            level = logging.WARNING if attempt == 1 or attempt % 60 == 0 else logging.DEBUG
            log.log(
                level,
                "transaction %s: end at %s not delivered (attempt %d): %s",
                transaction_id,
                broker,
                attempt,
                result,
            )
            remaining.add(broker)
        else:
            outcomes.append(result)
    return remaining, outcomes


def _committed(transaction_id: str, commit: bool, outcomes: list[str | None]) -> bool:
    wanted = "commit" if commit else None
    odd = [o for o in outcomes if o is not None and (o == "commit") != commit]
    if odd:  # a participant's halves ended the other way (discarded by the resolver)
        log.error("transaction %s decided %s, but a participant's part ended %s", transaction_id, wanted, odd)
        return not commit
    return commit


def start_retries(
    ctx: GatewayContext,
    transactional_id: str,
    transaction_id: str,
    commit: bool,
    remaining: set[str],
    outcomes: list[str | None],
    after: After | None = None,
) -> None:
    """Deliver an end to ``remaining`` in the background until every broker answered."""
    if transaction_id in ctx.pending_ends:
        return
    task = ctx.loop.create_task(
        _retry(ctx, transactional_id, transaction_id, commit, remaining, outcomes, after),
        name=f"kafka-txn-end-{transaction_id}",
    )
    ctx.pending_ends[transaction_id] = task
    task.add_done_callback(lambda _: ctx.pending_ends.pop(transaction_id, None))


async def _retry(
    ctx: GatewayContext,
    transactional_id: str,
    transaction_id: str,
    commit: bool,
    remaining: set[str],
    outcomes: list[str | None],
    after: After | None,
) -> None:
    delay = RETRY_FIRST_S
    attempt = 1
    while remaining:
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
        attempt += 1
        remaining, more = await _deliver(ctx, transactional_id, transaction_id, commit, remaining, attempt)
        outcomes.extend(more)
    assert ctx.ledger is not None
    await ctx.run_blocking(ctx.ledger.forget, transaction_id)
    log.info(
        "transaction %s: %s delivered to every participant", transaction_id, "commit" if commit else "abort"
    )
    async with ctx.txn_lock(transactional_id):
        entry = ctx.txn.get(transactional_id)
        if entry is not None and entry.transaction_id == transaction_id and entry.state in PREPARING:
            ctx.txn.end_done(transactional_id, _committed(transaction_id, commit, outcomes))
        if after is not None:
            await after()
