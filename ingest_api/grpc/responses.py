"""The protobuf answers the door sends most, built from the port's plain values (pure).

* QueryRoute / QueryAssignment: one ``MessageQueue`` per :class:`~ingest_api.grpc.port.QueueRoute`,
  ``broker{name, id, endpoints{IPv4 | IPv6 | DOMAIN_NAME, [host:port]}}`` (the gRPC door's own
  address), ``permission``, ``accept_message_types``; the topic echoes the request's
  ``Resource`` (namespace included), as the proxy's ``RouteActivity`` does.
* ReceiveMessage is a stream (the proxy's ``ReceiveMessageResponseStreamWriter``):
  ``{status}`` first (OK, or MESSAGE_NOT_FOUND / TOO_MANY_REQUESTS / an error alone), then one
  ``{message}`` per delivery, and always a last ``{delivery_timestamp: now}``.
* SendMessage: one entry per message; entries with different codes make the top-level status
  ``MULTIPLE_RESULTS``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence

from google.protobuf.timestamp_pb2 import Timestamp

from ingest_api.grpc.convert import to_proto
from ingest_api.grpc.port import Delivery, QueueRoute, ReceiveResult, ReceiveStatus, SendOutcome
from ingest_api.grpc.status import Code, ok, status
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb


def endpoints(host: str, port: int) -> pb.Endpoints:
    """``Endpoints`` for one address, its scheme from the host's form."""
    try:
        version = ipaddress.ip_address(host).version
        scheme = pb.IPv4 if version == 4 else pb.IPv6
    except ValueError:
        scheme = pb.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def message_queue(topic: pb.Resource, route: QueueRoute) -> pb.MessageQueue:
    return pb.MessageQueue(
        topic=topic,
        id=route.queue_id,
        permission=pb.Permission.Value(route.permission.value),
        broker=pb.Broker(
            name=route.broker_name, id=route.broker_id, endpoints=endpoints(route.host, route.port)
        ),
        accept_message_types=[pb.MessageType.Value(kind.value) for kind in route.accept],
    )


def query_route_response(topic: pb.Resource, routes: Sequence[QueueRoute]) -> spb.QueryRouteResponse:
    return spb.QueryRouteResponse(status=ok(), message_queues=[message_queue(topic, r) for r in routes])


def query_assignment_response(
    topic: pb.Resource, routes: Sequence[QueueRoute]
) -> spb.QueryAssignmentResponse:
    if not routes:
        return spb.QueryAssignmentResponse(status=status(Code.FORBIDDEN, "no readable queue"))
    return spb.QueryAssignmentResponse(
        status=ok(), assignments=[pb.Assignment(message_queue=message_queue(topic, r)) for r in routes]
    )


def send_response(outcomes: Sequence[SendOutcome]) -> spb.SendMessageResponse:
    """All messages stored: every entry OK (a failed put raises, answered as one status)."""
    entries = [
        spb.SendResultEntry(
            status=ok(), message_id=o.message_id, transaction_id=o.transaction_id, offset=o.queue_offset
        )
        for o in outcomes
    ]
    return spb.SendMessageResponse(status=ok() if entries else _empty_send(), entries=entries)


def _empty_send() -> pb.Status:
    return status(Code.INTERNAL_SERVER_ERROR, "send status is empty")


def receive_stream(result: ReceiveResult, now_ms: int) -> Iterator[spb.ReceiveMessageResponse]:
    """The responses of one ReceiveMessage call, in order (module doc)."""
    if result.status is ReceiveStatus.FOUND and result.deliveries:
        yield spb.ReceiveMessageResponse(status=ok())
        for delivery in result.deliveries:
            yield received_message(delivery, now_ms)
    elif result.status is ReceiveStatus.BUSY:
        yield spb.ReceiveMessageResponse(status=status(Code.TOO_MANY_REQUESTS, "too many receives waiting"))
    else:
        yield spb.ReceiveMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
    yield delivery_timestamp(now_ms)


def received_message(delivery: Delivery, now_ms: int) -> spb.ReceiveMessageResponse:
    message = to_proto(delivery.message, now_ms=now_ms, receipt_handle=delivery.receipt_handle)
    return spb.ReceiveMessageResponse(message=message)


def delivery_timestamp(now_ms: int) -> spb.ReceiveMessageResponse:
    """The stream's last response: the server's time, epoch ms."""
    stamp = Timestamp()
    stamp.FromMilliseconds(now_ms)
    return spb.ReceiveMessageResponse(delivery_timestamp=stamp)


def recover_orphaned_transaction(message: pb.Message, transaction_id: str) -> spb.TelemetryCommand:
    """A transaction check-back for a producer's Telemetry stream."""
    return spb.TelemetryCommand(
        recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=transaction_id
        )
    )
