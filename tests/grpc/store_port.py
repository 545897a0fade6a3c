"""A :class:`~ingest_api.grpc.port.GrpcBrokerPort` over one real ``store.MessageStore``, and the
door served from a thread of its own, for the server-shell tests.

The port routes and sends for real (a lone broker ``b1`` whose gRPC endpoint is the door's
address); POP is another engineer's service, so receives answer EMPTY and handle operations
INVALID; transactions are recorded, not resolved (the broker core's). It records the client
hooks it was called with.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from types import TracebackType

from ingest_api.grpc.clients import ClientSession
from ingest_api.grpc.port import (
    AckEntry,
    HandleResult,
    HandleStatus,
    QueueRoute,
    ReceiveRequest,
    ReceiveResult,
    ReceiveStatus,
    SendOutcome,
)
from ingest_api.grpc.server import GrpcDoor, MessagingService
from ingest_api.grpc.settings import GroupPolicy
from store import Message, MessageStore, UnknownTopic, sharding_queue
from store import vocabulary as v


@dataclass
class StorePort:
    store: MessageStore
    host: str = "127.0.0.1"
    port: int = 0  # set once the door is bound
    receives: list[ReceiveRequest] = field(default_factory=list)
    heartbeats: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    #: (message_id, transaction_id) of every half message stored
    halves: list[tuple[str, str]] = field(default_factory=list)
    #: (topic, message_id, transaction_id, commit, from_check) of every EndTransaction
    ends: list[tuple[str, str, str, bool, bool]] = field(default_factory=list)

    async def query_route(self, topic: str) -> list[QueueRoute]:
        queues = self.store.topics().get(topic)
        if queues is None:
            raise UnknownTopic(f"no topic {topic!r}")
        return [QueueRoute(q, broker_name="b1", host=self.host, port=self.port) for q in range(queues)]

    async def send(self, messages: list[Message], client_id: str) -> list[SendOutcome]:
        return await asyncio.to_thread(self._put, messages)

    def _put(self, messages: list[Message]) -> list[SendOutcome]:
        outcomes = []
        for message in messages:
            key = message.properties.get(v.PROPERTY_SHARDING_KEY)
            if key is not None:
                message.queue_id = sharding_queue(key, self.store.queue_count(message.topic))
            put = self.store.put_message(message)
            tx = put.uniq_key if message.transaction_prepared else ""  # the half's UNIQ_KEY
            outcomes.append(SendOutcome(put.uniq_key, put.queue_id, put.queue_offset, tx))
            if tx:
                self.halves.append((put.uniq_key, tx))
        return outcomes

    async def receive(self, request: ReceiveRequest) -> ReceiveResult:
        self.receives.append(request)
        return ReceiveResult(ReceiveStatus.EMPTY)

    async def ack(self, group: str, topic: str, entries: list[AckEntry]) -> list[HandleResult]:
        return [HandleResult(HandleStatus.INVALID, detail="no POP here") for _ in entries]

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> HandleResult:
        return HandleResult(HandleStatus.INVALID, detail="no POP here")

    async def forward_to_dlq(
        self, group: str, topic: str, receipt_handle: str, message_id: str, delivery_attempt: int
    ) -> HandleResult:
        return HandleResult(HandleStatus.INVALID, detail="no POP here")

    async def end_transaction(
        self, topic: str, message_id: str, transaction_id: str, commit: bool, from_check: bool
    ) -> None:
        self.ends.append((topic, message_id, transaction_id, commit, from_check))

    async def heartbeat(self, client: ClientSession) -> None:
        self.heartbeats.append(client.client_id)

    async def query_assignment(self, topic: str, group: str, client_id: str) -> list[QueueRoute]:
        return [QueueRoute(queue_id=-1, broker_name="b1", host=self.host, port=self.port)]

    async def group_policy(self, group: str) -> GroupPolicy | None:
        return GroupPolicy(fifo=group.startswith("fifo-"))

    async def client_gone(self, client: ClientSession) -> None:
        self.gone.append(client.client_id)


class SettableClock:
    """Epoch ms that a test moves by hand (the client registry's clock)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


class DoorThread:
    """The door on an event loop in a daemon thread; ``with DoorThread(service) as door``."""

    def __init__(self, service: MessagingService, expiry_check_s: float = 0.05) -> None:
        self.service = service
        self._expiry_check_s = expiry_check_s
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-door", daemon=True)
        self.door: GrpcDoor | None = None

    @property
    def port(self) -> int:
        assert self.door is not None
        return self.door.port

    def __enter__(self) -> DoorThread:
        self._thread.start()
        start = GrpcDoor.start(self.service, port=0, expiry_check_s=self._expiry_check_s)
        started = asyncio.run_coroutine_threadsafe(start, self.loop)
        self.door = started.result(timeout=10)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.door is not None:
            asyncio.run_coroutine_threadsafe(self.door.stop(0.5), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()
