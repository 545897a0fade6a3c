"""The gRPC door's rights table, without a server: every served RPC has a row, and each row asks
exactly the rights docs/security.md lists (a matrix: none, all, all but one)."""

from __future__ import annotations

from typing import Any

import pytest

from broker.security import Grant, Operation, Permission, Principal, ResourceType
from ingest_api.grpc.authz import RPC_RIGHTS, authorize_call
from ingest_api.grpc.status import Code
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb

T, G = ResourceType.TOPIC, ResourceType.GROUP
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
#: RPCs the door answers UNIMPLEMENTED (no right to check: nothing is served).
UNSERVED = {
    "PullMessage",
    "UpdateOffset",
    "GetOffset",
    "QueryOffset",
    "RecallMessage",
    "SyncLiteSubscription",
}

topic, group = pb.Resource(name="t"), pb.Resource(name="g")
subscribing = pb.Settings(subscription=pb.Subscription(group=group))

#: An example request of each RPC naming topic "t" and group "g", and the rights it needs.
Right = tuple[ResourceType, Operation, str]
CASES: list[tuple[Any, set[Right]]] = [
    (spb.QueryRouteRequest(topic=topic), {(T, D, "t")}),
    (spb.QueryAssignmentRequest(topic=topic, group=group), {(T, D, "t")}),
    (spb.SendMessageRequest(messages=[pb.Message(topic=topic)]), {(T, W, "t")}),
    (
        spb.SendMessageRequest(messages=[pb.Message(topic=topic), pb.Message(topic=pb.Resource(name="u"))]),
        {(T, W, "t"), (T, W, "u")},
    ),
    (spb.EndTransactionRequest(topic=topic), {(T, W, "t")}),
    (
        spb.ReceiveMessageRequest(group=group, message_queue=pb.MessageQueue(topic=topic)),
        {(T, R, "t"), (G, R, "g")},
    ),
    (spb.AckMessageRequest(group=group, topic=topic), {(T, R, "t"), (G, R, "g")}),
    (spb.ChangeInvisibleDurationRequest(group=group, topic=topic), {(T, R, "t"), (G, R, "g")}),
    (spb.ForwardMessageToDeadLetterQueueRequest(group=group, topic=topic), {(T, R, "t"), (G, R, "g")}),
    (spb.HeartbeatRequest(group=group), {(G, R, "g")}),
    (spb.HeartbeatRequest(), set()),  # a producer names no group: authenticated only
    (spb.NotifyClientTerminationRequest(group=group), {(G, R, "g")}),
    (spb.TelemetryCommand(settings=subscribing), {(G, R, "g")}),
    (spb.TelemetryCommand(settings=pb.Settings(publishing=pb.Publishing(topics=[topic]))), {(T, W, "t")}),
    (spb.TelemetryCommand(thread_stack_trace=spb.ThreadStackTrace()), set()),  # authenticated only
]


def holding(rights: set[Right]) -> Principal:
    grants = tuple(Grant(kind, name, frozenset({op}), Permission.ALLOW) for kind, op, name in rights)
    return Principal("u1", grants=grants)


def test_every_served_rpc_has_a_row() -> None:
    service = spb.DESCRIPTOR.services_by_name["MessagingService"]
    served = {m.input_type.full_name for m in service.methods if m.name not in UNSERVED}
    assert {t.DESCRIPTOR.full_name for t in RPC_RIGHTS} == served


@pytest.mark.parametrize(("request_", "needs"), CASES, ids=lambda c: type(c).__name__ if c else "")
def test_each_rpc_needs_exactly_its_rights(
    request_: Any, needs: set[tuple[ResourceType, Operation, str]]
) -> None:
    assert authorize_call(holding(needs), request_) is None
    for missing in needs:
        refused = authorize_call(holding(needs - {missing}), request_)
        assert refused is not None and refused.code == Code.UNAUTHORIZED
        kind, op, name = missing
        assert refused.message == f"'u1' may not {op.value} {kind.value} {name!r}"


def test_a_deny_wins_and_a_superuser_may_all() -> None:
    request = spb.SendMessageRequest(messages=[pb.Message(topic=topic)])
    deny = Grant(T, "t", frozenset({W}), Permission.DENY)
    allow = Grant(T, "*", frozenset({Operation.ALL}), Permission.ALLOW)
    assert authorize_call(Principal("u1", grants=(allow, deny)), request) is not None
    assert authorize_call(Principal("root", superuser=True), request) is None


def test_a_request_type_without_a_row_is_refused() -> None:
    refused = authorize_call(Principal("root", superuser=True), spb.PullMessageRequest())
    assert refused is not None and refused.code == Code.UNAUTHORIZED
