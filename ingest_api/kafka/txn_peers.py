"""The gateway's answers to other brokers (``POST /kafka/peer/{op}``), and a participant's side
of a transaction that spans brokers (the coordinator's side: :mod:`ingest_api.kafka.txn_cluster`).

:class:`PeerService` decodes a call (:mod:`ingest_api.kafka.peer_messages`), runs it on the
gateway's loop and encodes the answer; the HTTP door only routes the bytes to it
(``ingest_api/http/routers/kafka_peers.py``), so the protocol lives in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from cluster import QueueUnavailable
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.txn_offsets import coordinator_offsets
from ingest_api.kafka.peer_messages import (
    PEER_OPS,
    EndAnswer,
    EndMsg,
    ErrorAnswer,
    MirrorMsg,
    OffsetsHalfMsg,
    StateAnswer,
    StateAsk,
    TxnOffsetsMsg,
)
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.txn_cluster import end_local, end_request, half_of, mirror_of, put_offsets_half
from ingest_api.kafka.txn_coordinator import TxnState, parse_transaction_id
from ingest_api.kafka.txn_participants import Mirror
from store import InvalidArgument

log = logging.getLogger(__name__)


class UnknownPeerOp(InvalidArgument):
    """A ``/kafka/peer/{op}`` this version does not know (400 ``invalid_argument``)."""


# --- a participant writing halves ------------------------------------------------------------------
async def participant_join(
    ctx: GatewayContext, transactional_id: str, producer_id: int, epoch: int
) -> tuple[ErrorCode, Mirror | None]:
    """May this producer's transactional batch be stored here, and as halves of what? Asks the
    coordinator when this broker's announcement is missing or stale (after a restart)."""
    error = ctx.participants.check(transactional_id, producer_id, epoch)
    if error != ErrorCode.NONE:
        if not await _ask_coordinator(ctx, transactional_id):
            return ErrorCode.REQUEST_TIMED_OUT, None
        error = ctx.participants.check(transactional_id, producer_id, epoch)
    return error, ctx.participants.get(transactional_id) if error == ErrorCode.NONE else None


async def _ask_coordinator(ctx: GatewayContext, transactional_id: str) -> bool:
    """Install the coordinator's view of the open transaction; False when it cannot be asked."""
    link = ctx.cluster
    assert link is not None
    choice = link.coordinator(transactional_id, CoordinatorKind.TRANSACTION)
    if choice.broker_name is None or choice.node is None:
        return False
    try:
        answer: StateAnswer = await link.peer(
            choice.broker_name, "txn-state", StateAsk(transactional_id, link.me)
        )
    except QueueUnavailable as exc:
        log.info("transactional id %r: asking its coordinator failed: %s", transactional_id, exc)
        return False
    if answer.mirror is not None:
        ctx.participants.register(answer.mirror.mirror())
    return True


# --- the calls ---------------------------------------------------------------------------------------
async def _participant(ctx: GatewayContext, message: MirrorMsg) -> None:
    ctx.participants.register(message.mirror())


async def _state(ctx: GatewayContext, ask: StateAsk) -> StateAnswer:
    """At the coordinator (read-only, no lock: a participant may ask while holding its
    producer lock, which an end in progress here may be waiting for)."""
    entry = ctx.txn.get(ask.transactional_id)
    if entry is None or entry.state is not TxnState.ONGOING or ctx.ledger is None:
        return StateAnswer()
    record = ctx.ledger.get(entry.transaction_id)
    if record is None or ask.asker not in record.participants:
        return StateAnswer()
    return StateAnswer(MirrorMsg.of(mirror_of(ctx, entry)))


async def _txn_offsets(ctx: GatewayContext, message: TxnOffsetsMsg) -> ErrorAnswer:
    link = ctx.cluster
    if link is None or not link.coordinates(message.transactional_id, CoordinatorKind.TRANSACTION):
        return ErrorAnswer(ErrorCode.NOT_COORDINATOR)
    error = await coordinator_offsets(
        ctx, message.transactional_id, message.group, message.producer_id, message.epoch, message.offsets
    )
    return ErrorAnswer(error)


async def _offsets_half(ctx: GatewayContext, message: OffsetsHalfMsg) -> ErrorAnswer:
    mirror = message.mirror.mirror()
    ctx.participants.register(mirror)
    tid = mirror.transactional_id
    current = ctx.participants.get(tid)
    error = ctx.participants.check(tid, mirror.producer_id, mirror.epoch)
    if error != ErrorCode.NONE or current is None or current.transaction_id != mirror.transaction_id:
        return ErrorAnswer(error if error != ErrorCode.NONE else ErrorCode.INVALID_TXN_STATE)
    half = half_of(tid, mirror.transaction_id, mirror.timeout_ms, participant=True)
    return ErrorAnswer(await put_offsets_half(ctx, half, mirror.producer_id, message.group, message.offsets))


async def _end(ctx: GatewayContext, message: EndMsg) -> EndAnswer:
    parsed = parse_transaction_id(message.transaction_id)
    if parsed is None:
        raise InvalidArgument(f"{message.transaction_id!r} is not a Kafka transaction id")
    request = end_request(message.transactional_id, message.transaction_id, message.commit)
    outcome = await end_local(ctx, parsed[0], request)
    ctx.participants.ended(message.transactional_id, message.transaction_id)
    return EndAnswer(outcome)


_HANDLERS: dict[str, Callable[[GatewayContext, Any], Awaitable[msgspec.Struct | None]]] = {
    "txn-participant": _participant,
    "txn-state": _state,
    "txn-offsets": _txn_offsets,
    "txn-offsets-half": _offsets_half,
    "txn-end": _end,
}
assert set(_HANDLERS) == set(PEER_OPS)


class PeerService:
    """What ``Broker.kafka_peer`` is while the gateway runs in a cluster."""

    def __init__(self, ctx: GatewayContext) -> None:
        self._ctx = ctx

    async def handle(self, op: str, body: bytes) -> bytes:
        """The JSON answer to one call. Raises :class:`UnknownPeerOp` / :class:`InvalidArgument`
        for a call this version does not know or a malformed body (400 over HTTP)."""
        message_type = PEER_OPS.get(op)
        if message_type is None:
            raise UnknownPeerOp(f"unknown Kafka peer call {op!r}")
        try:
            message = msgspec.json.decode(body, type=message_type)
        except msgspec.DecodeError as exc:
            raise InvalidArgument(f"Kafka peer call {op!r}: {exc}") from None
        answer = await _HANDLERS[op](self._ctx, message)
        return msgspec.json.encode(answer) if answer is not None else b"{}"
