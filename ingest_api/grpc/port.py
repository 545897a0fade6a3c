"""What the gRPC door asks of the broker: :class:`GrpcBrokerPort`, in plain values.

The door (``server.py``) turns each RPC into one call here and the answer back into protobuf;
the broker core and the POP service implement the port and never see a protobuf. Expected
outcomes are values (an empty receive, an invalid receipt handle); faults are
:class:`store.SparkMQError` subclasses, answered with the ``Code`` of their stable error code
(``status.CODE_BY_ERROR``): ``UnknownTopic`` -> ``TOPIC_NOT_FOUND``, ``UnknownTransaction`` ->
``INVALID_TRANSACTION_ID`` and so on. Every method is a coroutine: a receive long-polls, and
an implementation runs blocking store calls off the event loop as it sees fit.

Names follow RocketMQ 5's proxy (``MessagingProcessor``): the methods the issue lists, one per
RPC - query_route, send, receive, ack, change_invisible, forward_to_dlq, end_transaction,
heartbeat, query_assignment - and two the door needs around them: group_policy (the settings
reply) and client_gone (NotifyClientTermination, expiry).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

from ingest_api.grpc.clients import ClientSession
from ingest_api.grpc.settings import GroupPolicy
from store import Message, MessageView


class Permission(enum.Enum):
    """What clients may do with a queue (names as ``apache.rocketmq.v2.Permission``)."""

    NONE = "NONE"
    READ = "READ"
    WRITE = "WRITE"
    READ_WRITE = "READ_WRITE"


class MessageKind(enum.Enum):
    """Message types a queue accepts (names as ``apache.rocketmq.v2.MessageType``)."""

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"


ALL_KINDS: tuple[MessageKind, ...] = tuple(MessageKind)


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """One queue of a route or an assignment: where clients reach it."""

    queue_id: int  # -1 in a non-FIFO assignment: "any queue of this broker"
    broker_name: str
    #: The gRPC endpoint of the broker's master (clients use ``broker_id == 0`` only).
    host: str
    port: int
    broker_id: int = 0
    permission: Permission = Permission.READ_WRITE
    accept: tuple[MessageKind, ...] = ALL_KINDS


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """Where one sent message landed."""

    message_id: str  # the client's id (the stored UNIQ_KEY)
    queue_id: int
    queue_offset: int
    #: The id EndTransaction will name (transactional messages), else ``""``.
    transaction_id: str = ""


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    """One ReceiveMessage call, its durations in ms."""

    client_id: str
    group: str
    topic: str
    #: A tag expression (``*``, ``a || b``); SQL filters are refused before the port is asked.
    tag_expression: str
    max_messages: int
    #: ``None`` with ``auto_renew`` (a push consumer): the service picks and renews it.
    invisible_ms: int | None
    auto_renew: bool
    #: How long to wait for a first message (already clamped to the call's deadline).
    wait_ms: int
    attempt_id: str = ""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed out by a receive."""

    message: MessageView  # presented under its original topic, reconsume times = attempts - 1
    receipt_handle: str


class ReceiveStatus(enum.Enum):
    FOUND = "FOUND"
    #: Nothing to hand out before ``wait_ms`` ran out (answered ``MESSAGE_NOT_FOUND``).
    EMPTY = "EMPTY"
    #: Too many receives parked on this group (answered ``TOO_MANY_REQUESTS``).
    BUSY = "BUSY"


@dataclass(frozen=True, slots=True)
class ReceiveResult:
    status: ReceiveStatus
    deliveries: list[Delivery] = field(default_factory=list)


class HandleStatus(enum.Enum):
    OK = "OK"
    #: Malformed, forged, stale or expired (answered ``INVALID_RECEIPT_HANDLE``).
    INVALID = "INVALID"


@dataclass(frozen=True, slots=True)
class HandleResult:
    """The outcome of an operation on one receipt handle."""

    status: HandleStatus
    #: ChangeInvisibleDuration: the new handle (the old one stops working).
    receipt_handle: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class AckEntry:
    message_id: str
    receipt_handle: str


class GrpcBrokerPort(Protocol):
    """The broker as the gRPC door sees it (module doc)."""

    async def query_route(self, topic: str, create: bool = True) -> list[QueueRoute]:
        """Every queue of ``topic``, on every broker name (``UnknownTopic`` when none). A
        missing topic is created as a first produce would, unless ``create`` is false (the
        caller may not: ``UnknownTopic``)."""
        ...

    async def send(self, messages: list[Message], client_id: str) -> list[SendOutcome]:
        """Put one SendMessage call's messages (one topic; the store or the service picks
        the queue, by ``__SHARDINGKEY`` for FIFO); one outcome per message, in order."""
        ...

    async def receive(self, request: ReceiveRequest) -> ReceiveResult:
        """POP up to ``max_messages`` from the broker's queues of the topic and the group's
        retries, long-polling up to ``wait_ms``."""
        ...

    async def ack(self, group: str, topic: str, entries: list[AckEntry]) -> list[HandleResult]:
        """Make each message done for ``group``; one result per entry, in order."""
        ...

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, message_id: str, invisible_ms: int
    ) -> HandleResult:
        """Hide the message ``invisible_ms`` from now; the result carries the new handle."""
        ...

    async def forward_to_dlq(
        self, group: str, topic: str, receipt_handle: str, message_id: str, delivery_attempt: int
    ) -> HandleResult:
        """Put the message to ``%DLQ%group`` and ack it (a FIFO push consumer gave up)."""
        ...

    async def end_transaction(
        self, topic: str, message_id: str, transaction_id: str, commit: bool, from_check: bool
    ) -> None:
        """Commit or roll back the half message ``transaction_id`` names."""
        ...

    async def heartbeat(self, client: ClientSession) -> None:
        """``client`` is alive (consumer group membership for assignments)."""
        ...

    async def query_assignment(
        self, topic: str, group: str, client_id: str, create: bool = True
    ) -> list[QueueRoute]:
        """A push consumer's queues: one per broker (``queue_id -1``) for a non-FIFO group,
        one per readable queue for a FIFO group; empty answers ``FORBIDDEN``. ``create`` as
        for :meth:`query_route`."""
        ...

    async def group_policy(self, group: str) -> GroupPolicy | None:
        """The consumer group's policy for the settings reply (``None``: the defaults)."""
        ...

    async def client_gone(self, client: ClientSession) -> None:
        """``client`` terminated or expired: release what it held (auto-renewed handles)."""
        ...
