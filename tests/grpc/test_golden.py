"""The door's most frequent answers, serialized with the generated code, equal the hand-derived
golden bytes of :mod:`tests.grpc.golden` (and parse back to the same values)."""

from __future__ import annotations

from google.protobuf.message import Message as ProtoMessage

from ingest_api.grpc.port import Delivery, QueueRoute
from ingest_api.grpc.responses import query_route_response, received_message
from ingest_api.grpc.settings import settings_reply
from ingest_api.grpc.status import ok
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from tests.grpc import golden


def wire(value: ProtoMessage) -> bytes:
    return bytes(value.SerializeToString(deterministic=True))


def assert_golden(value: ProtoMessage, expected: bytes) -> None:
    assert wire(value).hex() == expected.hex()
    parsed = type(value)()
    parsed.ParseFromString(expected)
    assert parsed == value


def test_status_ok() -> None:
    assert_golden(ok(), golden.STATUS_OK)


def test_query_route_with_one_queue() -> None:
    route = QueueRoute(queue_id=0, broker_name="b1", host="127.0.0.1", port=8081)
    assert_golden(query_route_response(pb.Resource(name="T"), [route]), golden.QUERY_ROUTE_ONE_QUEUE)


def test_receive_response_carrying_a_message() -> None:
    response = received_message(Delivery(golden.STORED_VIEW, receipt_handle="h"), now_ms=0)
    assert_golden(response, golden.RECEIVED_MESSAGE)


def test_settings_reply_to_a_producer() -> None:
    client = pb.Settings(client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    reply = settings_reply(client)
    assert_golden(reply, golden.SETTINGS_REPLY_PRODUCER)
    assert isinstance(reply, spb.TelemetryCommand)
