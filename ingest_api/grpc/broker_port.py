"""The gRPC door's port over the broker core: :class:`BrokerPort` implements
:class:`~ingest_api.grpc.port.GrpcBrokerPort` with a running :class:`broker.state.Broker`.

One row per RPC, each a core call::

    query_route       the cluster's placement (a lone broker: the store's topic), each queue at
                      the gRPC door of its broker name's master (endpoints.DoorDirectory)
    send              normal / FIFO / delay: broker.produce.produce_message (the coalesced put);
                      transactional: the half through the same put, registered with the
                      transaction board (its id is the client's message id)
    end_transaction   the board's EndCoalescer (commit or roll back, idempotent)
    receive           broker.pop.waiting.receive_waiting (long poll on the event loop)
    ack / change_invisible / forward_to_dlq    broker.pop (PopService)
    query_assignment  one assignment per broker name with a door (queue -1: POP pops the
                      whole broker), one per queue for a FIFO group
    group_policy      the POP group's settings (FIFO, retries)
    heartbeat         nothing to keep: the registry has the clients, POP's state needs none
    client_gone       a push consumer's auto-renewed deliveries are released (visible in 1 s)

Queue choice (``send``): the store's round robin over this broker's own queues; a message
group by RocketMQ's sharding hash over them (on a lone broker that is the HTTP door's rule;
in a cluster the client already picked the broker by the message group, so the group stays on
one queue of it while the route does not change).
"""

from __future__ import annotations

import dataclasses
import time

from broker.cluster_info import LOCAL_BROKER as LOCAL_NAME
from broker.pop import PopError, PopService, Received
from broker.pop.waiting import receive_waiting
from broker.produce import produce_message
from broker.state import Broker
from broker.threads import run_blocking
from broker.transactions import TransactionBoard
from ingest_api.grpc.clients import ClientSession
from ingest_api.grpc.endpoints import DoorDirectory
from ingest_api.grpc.held import HeldHandles
from ingest_api.grpc.port import (
    AckEntry,
    Delivery,
    HandleResult,
    HandleStatus,
    QueueRoute,
    ReceiveRequest,
    ReceiveResult,
    ReceiveStatus,
    SendOutcome,
)
from ingest_api.grpc.settings import GroupPolicy
from ingest_api.grpc.status import Code, GrpcRefusal
from store import (
    PROPERTY_TRANSACTION_ID,
    Message,
    NotMaster,
    PutResult,
    TxOutcome,
    UnknownTopic,
    sharding_queue,
)
from store import vocabulary as v
from store.publish import EndRequest

#: What an auto-renewing (push) consumer's deliveries get as invisible time (the proxy's).
AUTO_RENEW_INVISIBLE_MS = 60_000


class BrokerPort:
    """The gRPC door's view of one running broker (module doc)."""

    def __init__(
        self, broker: Broker, doors: DoorDirectory, auto_renew_invisible_ms: int = AUTO_RENEW_INVISIBLE_MS
    ) -> None:
        self.broker = broker
        self.doors = doors
        self.auto_renew_invisible_ms = auto_renew_invisible_ms
        self._turns: dict[str, int] = {}
        #: Deliveries of auto-renewing (push) consumers, released when the client goes.
        self.held = HeldHandles()

    @property
    def pop(self) -> PopService:
        pop: PopService | None = self.broker.pop
        if pop is None:
            raise GrpcRefusal(Code.INTERNAL_SERVER_ERROR, "this broker has no POP service")
        return pop

    # --- routes --------------------------------------------------------------------------

    async def query_route(self, topic: str, create: bool = True) -> list[QueueRoute]:
        owners = await self._placement(topic, create)
        routes = []
        for queue_id, owner in enumerate(owners):
            door = self.doors.serving_door(owner)
            if door is not None:
                routes.append(QueueRoute(queue_id, owner, door.host, door.port))
        if not routes:
            raise GrpcRefusal(Code.TOPIC_NOT_FOUND, f"no broker serving topic {topic!r} runs a gRPC door")
        return routes

    async def _placement(self, topic: str, create: bool = True) -> tuple[str, ...]:
        """The owner's broker name of each queue id of ``topic``, creating the topic when the
        broker auto-creates topics (as a first produce would) and ``create`` allows it. Raises
        ``UnknownTopic``."""
        node = self.broker.cluster
        store = self.broker.store
        if node is None:
            if not store.has_topic(topic):
                if not create:
                    raise UnknownTopic(f"topic {topic!r} does not exist")
                await run_blocking(store.ensure_topic, topic)
            return (LOCAL_NAME,) * store.queue_count(topic)
        placement = node.view.placement(topic)
        if placement is None:
            if not node.config.auto_create_topics or not create:
                raise UnknownTopic(f"topic {topic!r} does not exist in the cluster")
            placement = await run_blocking(node.ensure_topic, topic)
        return placement.owners

    async def query_assignment(
        self, topic: str, group: str, client_id: str, create: bool = True
    ) -> list[QueueRoute]:
        routes = await self.query_route(topic, create)
        if (await self.group_policy(group) or GroupPolicy()).fifo:
            return routes
        by_broker: dict[str, QueueRoute] = {}
        for route in routes:
            by_broker.setdefault(route.broker_name, dataclasses.replace(route, queue_id=-1))
        return list(by_broker.values())

    # --- sending -------------------------------------------------------------------------

    async def send(self, messages: list[Message], client_id: str) -> list[SendOutcome]:
        outcomes = []
        for message in messages:
            started = time.perf_counter()
            placed = await self._placed(message)
            if message.transaction_prepared:
                outcomes.append(await self._send_half(placed))
                continue
            result = await produce_message(self.broker, placed, started=started)
            outcomes.append(SendOutcome(result.uniq_key, result.queue_id, result.queue_offset))
        return outcomes

    async def _placed(self, message: Message) -> Message:
        """``message`` on one of this broker's queues of its topic (module doc)."""
        own = await self._own_queues(message.topic)
        key = message.properties.get(v.PROPERTY_SHARDING_KEY)
        if own is None:  # a lone broker: the store's round robin, or the sharding rule
            if key is None:
                return message
            count = self.broker.store.queue_count(message.topic)
            return dataclasses.replace(message, queue_id=sharding_queue(key, count))
        if not own:
            raise NotMaster(f"this broker serves no queue of topic {message.topic!r}: refresh the route")
        if key is None:
            return dataclasses.replace(message, queue_id=own[self._turn(message.topic) % len(own)])
        return dataclasses.replace(message, queue_id=own[sharding_queue(key, len(own))])

    async def _own_queues(self, topic: str) -> tuple[int, ...] | None:
        """This broker's queue ids of ``topic`` in a cluster (empty on a slave or a broker
        that owns none), ``None`` for a lone broker. Creates the topic as a produce would."""
        owners = await self._placement(topic)
        node = self.broker.cluster
        if node is None:
            return None
        if not node.serving:
            return ()
        store = self.broker.store
        if not store.has_topic(topic) or store.queue_count(topic) < len(owners):
            # the route watch may not have created the local topic yet
            await run_blocking(self.broker.local_topics.ensure_local, topic, len(owners))
        return tuple(q for q, owner in enumerate(owners) if owner == node.name)

    def _turn(self, topic: str) -> int:
        """The next round-robin turn over this broker's queues of ``topic`` (event loop only)."""
        turn = self._turns.get(topic, 0)
        self._turns[topic] = turn + 1
        return turn

    async def _send_half(self, message: Message) -> SendOutcome:
        """Store a transaction's half (its id: the client's message id) and register it."""
        board = self._board()
        txid = message.uniq_key or ""
        group = message.topic  # RocketMQ 5's producer group is the topic (PGROUP)
        half = dataclasses.replace(message, properties={**message.properties, PROPERTY_TRANSACTION_ID: txid})
        result: PutResult = await self.broker.producer.put(half)
        board.service.register(txid, group, [result], result.store_timestamp_ms, [message.topic])
        self.broker.metrics.produced(message.topic, 1, len(message.body), "single", 0.0)
        return SendOutcome(result.uniq_key, result.queue_id, result.queue_offset, txid)

    def _board(self) -> TransactionBoard:
        board = self.broker.operators.transactions if self.broker.operators is not None else None
        if board is None:
            raise GrpcRefusal(Code.INTERNAL_SERVER_ERROR, "this broker has no transaction service")
        return board

    async def end_transaction(
        self, topic: str, message_id: str, transaction_id: str, commit: bool, from_check: bool
    ) -> None:
        outcome = TxOutcome.COMMIT if commit else TxOutcome.ROLLBACK
        await self._board().ends.end(EndRequest(transaction_id, outcome, topic))

    # --- consuming -----------------------------------------------------------------------

    async def receive(self, request: ReceiveRequest) -> ReceiveResult:
        pop = self.pop
        invisible = request.invisible_ms if request.invisible_ms is not None else self.auto_renew_invisible_ms
        wait = min(request.wait_ms, pop.config.max_wait_ms)
        tags = None if request.tag_expression.strip() in ("", "*") else request.tag_expression
        got = await receive_waiting(
            pop, request.group, request.topic, request.max_messages, invisible, wait, tags
        )
        if not got:
            return ReceiveResult(ReceiveStatus.EMPTY)
        if request.auto_renew:
            self.held.hold(request.client_id, request.group, (r.receipt_handle for r in got))
        return ReceiveResult(ReceiveStatus.FOUND, [_delivery(request.topic, r) for r in got])

    async def ack(self, group: str, topic: str, entries: list[AckEntry]) -> list[HandleResult]:
        results = await run_blocking(self.pop.ack, group, [e.receipt_handle for e in entries])
        self.held.forget(r.receipt_handle for r in results if r.ok)
        return [
            HandleResult(HandleStatus.OK) if r.ok else HandleResult(HandleStatus.INVALID, detail=r.detail)
            for r in results
        ]

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> HandleResult:
        try:
            changed = await run_blocking(self.pop.change_invisible, group, receipt_handle, invisible_ms)
        except PopError as exc:
            if not _is_handle_error(exc):
                raise
            return HandleResult(HandleStatus.INVALID, detail=str(exc))
        self.held.replace(receipt_handle, changed.receipt_handle)
        return HandleResult(HandleStatus.OK, receipt_handle=changed.receipt_handle)

    async def forward_to_dlq(
        self, group: str, topic: str, receipt_handle: str, message_id: str, delivery_attempt: int
    ) -> HandleResult:
        try:
            await run_blocking(self.pop.dead_letter, group, receipt_handle)
        except PopError as exc:
            if not _is_handle_error(exc):
                raise
            return HandleResult(HandleStatus.INVALID, detail=str(exc))
        self.held.forget([receipt_handle])
        return HandleResult(HandleStatus.OK)

    async def group_policy(self, group: str) -> GroupPolicy | None:
        pop = self.broker.pop
        if pop is None or not pop.table.secret:  # no POP here, or a replica not loaded yet
            return None
        settings = pop.table.group_settings(group)
        return GroupPolicy(fifo=settings.fifo, max_retries=settings.max_retries)

    async def heartbeat(self, client: ClientSession) -> None:
        return None

    async def client_gone(self, client: ClientSession) -> None:
        """Release the deliveries a push consumer still holds: visible again after POP's
        shortest invisible time (the proxy's 1 s), so another consumer gets them at once."""
        released = self.held.release(client.client_id)
        if released and self.broker.pop is not None:
            await run_blocking(self._release, released)

    def _release(self, released: list[tuple[str, str]]) -> None:
        pop = self.pop
        for group, handle in released:
            try:
                pop.change_invisible(group, handle, pop.config.min_invisible_ms)
            except PopError as exc:  # acked or redelivered meanwhile: nothing to release
                if not _is_handle_error(exc):
                    raise


_HANDLE_ERRORS = ("invalid_receipt_handle", "receipt_handle_expired", "receipt_handle_mismatch")


def _is_handle_error(error: PopError) -> bool:
    return error.code in _HANDLE_ERRORS


def _delivery(topic: str, received: Received) -> Delivery:
    """A received message as the door shows it: under the topic asked for (a retry is stored
    in the group's retry topic) with ``reconsume_times`` = delivery attempt - 1."""
    view = dataclasses.replace(received.message, topic=topic, reconsume_times=received.delivery_attempt - 1)
    return Delivery(view, received.receipt_handle)
