"""Requests into plain values, with the proxy's checks (no I/O; the call context is only read).

* metadata: ``x-mq-client-id`` (every call), the peer's ``(ip, port)`` from ``context.peer()``;
* names: a topic (``ILLEGAL_TOPIC``: malformed or a system topic) and a consumer group
  (``ILLEGAL_CONSUMER_GROUP``: malformed, or a retry/DLQ/system name);
* ReceiveMessage (the proxy's ``ReceiveMessageActivity``): a TAG filter only (SQL92 is
  ``ILLEGAL_FILTER_EXPRESSION``), ``batch_size`` clamped to 1..32, an invisible duration unless
  ``auto_renew`` (``ILLEGAL_INVISIBLE_TIME`` outside 0 < t <= 12 h; shorter than the proxy's 10 s
  minimum is allowed, for fast tests), the long-poll time clamped to 5..20 s and to the call's
  deadline less 100 ms (``ILLEGAL_POLLING_TIME`` when nothing is left);
* EndTransaction: a transaction id (``INVALID_TRANSACTION_ID``) and COMMIT or ROLLBACK
  (``BAD_REQUEST``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.convert import check_topic
from ingest_api.grpc.port import ReceiveRequest
from ingest_api.grpc.status import Code, GrpcRefusal
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from store import InvalidArgument, is_system_topic, validate_group

CLIENT_ID_KEY = "x-mq-client-id"

__all__ = ["CLIENT_ID_KEY", "ReceiveRules", "TransactionEnd", "check_topic"]


@dataclass(frozen=True, slots=True)
class ReceiveRules:
    """Bounds of a ReceiveMessage call (the proxy's ``ProxyConfig`` defaults), in ms."""

    max_batch_size: int = 32
    max_invisible_ms: int = 12 * 3600 * 1000
    #: What an auto-renewing (push) consumer's messages start with; the service renews them.
    auto_renew_invisible_ms: int = 60_000
    min_long_polling_ms: int = 5_000
    max_long_polling_ms: int = 20_000
    #: Kept back from the call's deadline so the answer arrives before it.
    deadline_reserve_ms: int = 100


@dataclass(frozen=True, slots=True)
class TransactionEnd:
    topic: str
    message_id: str
    transaction_id: str
    commit: bool
    from_check: bool


def client_id_of(context: Any) -> str:
    """The call's ``x-mq-client-id`` ("" when missing)."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID_KEY:
            return str(value)
    return ""


def peer_of(context: Any) -> tuple[str, int]:
    """The client's ``(ip, port)`` from gRPC's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` peer string
    (``("0.0.0.0", 0)`` for a peer that is not an IP socket, e.g. a Unix socket)."""
    peer: str = context.peer() or ""
    scheme, _, address = peer.partition(":")
    if scheme not in ("ipv4", "ipv6"):
        return ("0.0.0.0", 0)
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port) if port.isdigit() else 0)


def check_group(name: str) -> None:
    """Refuse a malformed or reserved consumer group name (``ILLEGAL_CONSUMER_GROUP``)."""
    try:
        validate_group(name)
    except InvalidArgument as exc:
        raise GrpcRefusal(Code.ILLEGAL_CONSUMER_GROUP, str(exc)) from None
    if is_system_topic(name) or name.startswith(("%RETRY%", "%DLQ%", "CID_RMQ_SYS_")):
        raise GrpcRefusal(Code.ILLEGAL_CONSUMER_GROUP, "cannot use system consumer group")


def check_group_and_topic(group: str, topic: str) -> None:
    check_group(group)
    check_topic(topic)


def receive_request(
    request: spb.ReceiveMessageRequest, client_id: str, time_remaining_s: float | None, rules: ReceiveRules
) -> ReceiveRequest:
    """A ReceiveMessage call as the port's :class:`ReceiveRequest` (checks in the module doc).

    ``time_remaining_s`` is the call's ``context.time_remaining()`` (``None``: no deadline).
    """
    group, topic = request.group.name, request.message_queue.topic.name
    check_group_and_topic(group, topic)
    expression = request.filter_expression
    if expression.type == pb.SQL:
        raise GrpcRefusal(Code.ILLEGAL_FILTER_EXPRESSION, "SQL92 filter expressions are not supported")
    if request.auto_renew:
        invisible = None
    elif request.HasField("invisible_duration"):
        invisible = invisible_ms(request.invisible_duration, rules)
    else:
        raise GrpcRefusal(Code.ILLEGAL_INVISIBLE_TIME, "invisible_duration is required without auto_renew")
    return ReceiveRequest(
        client_id=client_id,
        group=group,
        topic=topic,
        tag_expression=expression.expression.strip() or "*",
        max_messages=min(max(request.batch_size, 1), rules.max_batch_size),
        invisible_ms=invisible,
        auto_renew=request.auto_renew,
        wait_ms=polling_ms(request, time_remaining_s, rules),
        attempt_id=request.attempt_id,
    )


def invisible_ms(duration: Duration, rules: ReceiveRules) -> int:
    """An invisible duration in ms, refused outside ``0 < t <= max`` (``ILLEGAL_INVISIBLE_TIME``)."""
    value = int(duration.ToMilliseconds())
    if value <= 0:
        raise GrpcRefusal(Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small: {value} ms")
    if value > rules.max_invisible_ms:
        raise GrpcRefusal(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {rules.max_invisible_ms}"
        )
    return value


def polling_ms(
    request: spb.ReceiveMessageRequest, time_remaining_s: float | None, rules: ReceiveRules
) -> int:
    """How long the receive may wait for a first message (module doc)."""
    wanted = rules.max_long_polling_ms
    if request.HasField("long_polling_timeout"):
        wanted = request.long_polling_timeout.ToMilliseconds()
    wait = min(max(wanted, rules.min_long_polling_ms), rules.max_long_polling_ms)
    if time_remaining_s is None:
        return wait
    left = int(time_remaining_s * 1000) - rules.deadline_reserve_ms
    if left <= 0:
        raise GrpcRefusal(Code.ILLEGAL_POLLING_TIME, "the call's deadline leaves no time to poll")
    return min(wait, left)


def transaction_end(request: spb.EndTransactionRequest) -> TransactionEnd:
    check_topic(request.topic.name)
    if not request.transaction_id.strip():
        raise GrpcRefusal(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
    if request.resolution not in (pb.COMMIT, pb.ROLLBACK):
        raise GrpcRefusal(Code.BAD_REQUEST, f"unknown transaction resolution {request.resolution}")
    return TransactionEnd(
        topic=request.topic.name,
        message_id=request.message_id,
        transaction_id=request.transaction_id,
        commit=request.resolution == pb.COMMIT,
        from_check=request.source == pb.SOURCE_SERVER_CHECK,
    )
