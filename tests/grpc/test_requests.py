"""Requests into plain values: metadata, names and the ReceiveMessage rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.requests import (
    ReceiveRules,
    check_group,
    client_id_of,
    peer_of,
    polling_ms,
    receive_request,
    transaction_end,
)
from ingest_api.grpc.status import Code, GrpcRefusal
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb

RULES = ReceiveRules()


@dataclass
class CallContext:
    """What the functions read of a grpc.aio ServicerContext: its metadata and peer."""

    metadata: tuple[tuple[str, str], ...] = ()
    address: str = ""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def peer(self) -> str:
        return self.address


def refusal_code(call: object, *args: object) -> int:
    with pytest.raises(GrpcRefusal) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.status_code


def test_client_id_and_peer() -> None:
    context = CallContext((("x-mq-language", "PYTHON"), ("x-mq-client-id", "h@1@0@x")), "ipv4:10.0.0.5:40000")
    assert client_id_of(context) == "h@1@0@x" and client_id_of(CallContext()) == ""
    assert peer_of(context) == ("10.0.0.5", 40000)
    assert peer_of(CallContext(address="ipv6:[::1]:5")) == ("::1", 5)
    assert peer_of(CallContext(address="unix:/tmp/s")) == ("0.0.0.0", 0)


def test_reserved_groups_are_refused() -> None:
    check_group("orders-workers")
    for bad in ("%RETRY%G", "%DLQ%G", "CID_RMQ_SYS_REVIVE_GROUP", "bad group", ""):
        assert refusal_code(check_group, bad) == Code.ILLEGAL_CONSUMER_GROUP, bad


def request(**fields: object) -> spb.ReceiveMessageRequest:
    base: dict[str, object] = {
        "group": pb.Resource(name="G"),
        "message_queue": pb.MessageQueue(topic=pb.Resource(name="orders"), id=0),
        "filter_expression": pb.FilterExpression(type=pb.TAG, expression="a || b"),
        "batch_size": 16,
        "invisible_duration": Duration(seconds=15),
    } | fields
    return spb.ReceiveMessageRequest(**base)  # type: ignore[arg-type]


def test_a_receive_becomes_the_ports_request() -> None:
    asked = receive_request(request(attempt_id="a-1"), "c1", 23.0, RULES)
    assert (asked.client_id, asked.group, asked.topic, asked.tag_expression) == (
        "c1",
        "G",
        "orders",
        "a || b",
    )
    assert (asked.max_messages, asked.invisible_ms, asked.auto_renew, asked.attempt_id) == (
        16,
        15_000,
        False,
        "a-1",
    )
    assert asked.wait_ms == 20_000  # no long_polling_timeout: the server's 20 s
    assert receive_request(request(batch_size=0), "c1", None, RULES).max_messages == 1
    assert receive_request(request(batch_size=99), "c1", None, RULES).max_messages == 32
    empty_filter = request(filter_expression=pb.FilterExpression(type=pb.TAG, expression=" "))
    assert receive_request(empty_filter, "c1", None, RULES).tag_expression == "*"


def test_receive_refusals() -> None:
    sql = request(filter_expression=pb.FilterExpression(type=pb.SQL, expression="a > 1"))
    assert refusal_code(receive_request, sql, "c", None, RULES) == Code.ILLEGAL_FILTER_EXPRESSION
    no_invisible = spb.ReceiveMessageRequest()
    no_invisible.CopyFrom(request())
    no_invisible.ClearField("invisible_duration")
    assert refusal_code(receive_request, no_invisible, "c", None, RULES) == Code.ILLEGAL_INVISIBLE_TIME
    for bad in (Duration(), Duration(seconds=12 * 3600 + 1)):
        code = refusal_code(receive_request, request(invisible_duration=bad), "c", None, RULES)
        assert code == Code.ILLEGAL_INVISIBLE_TIME
    topic = request(message_queue=pb.MessageQueue(topic=pb.Resource(name="RMQ_SYS_TRANS_HALF_TOPIC")))
    assert refusal_code(receive_request, topic, "c", None, RULES) == Code.ILLEGAL_TOPIC


def test_long_polling_is_clamped_to_the_rules_and_the_deadline() -> None:
    def wait(seconds: float, remaining: float | None) -> int:
        return polling_ms(request(long_polling_timeout=Duration(seconds=int(seconds))), remaining, RULES)

    assert wait(1, None) == 5_000 and wait(60, None) == 20_000 and wait(10, None) == 10_000
    assert wait(20, 3.0) == 2_900  # the deadline less 100 ms
    assert refusal_code(wait, 20, 0.05) == Code.ILLEGAL_POLLING_TIME


def test_transaction_ends() -> None:
    def end(**fields: object) -> spb.EndTransactionRequest:
        base: dict[str, object] = {
            "topic": pb.Resource(name="orders"),
            "message_id": "01AB",
            "transaction_id": "tx-1",
            "resolution": pb.COMMIT,
            "source": pb.SOURCE_SERVER_CHECK,
        } | fields
        return spb.EndTransactionRequest(**base)  # type: ignore[arg-type]

    done = transaction_end(end())
    assert (done.topic, done.message_id, done.transaction_id, done.commit, done.from_check) == (
        "orders",
        "01AB",
        "tx-1",
        True,
        True,
    )
    assert not transaction_end(end(resolution=pb.ROLLBACK, source=pb.SOURCE_CLIENT)).commit
    assert refusal_code(transaction_end, end(transaction_id=" ")) == Code.INVALID_TRANSACTION_ID
    assert refusal_code(transaction_end, end(resolution=0)) == Code.BAD_REQUEST
