"""The gRPC door's shell on a real socket, over a real store: the official RocketMQ 5 Producer
sends through it, and raw calls with our generated stub check metadata, the receive stream's
shape, the Telemetry exchange and the RPCs that are not served."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.clients import ClientRegistry
from ingest_api.grpc.requests import ReceiveRules
from ingest_api.grpc.server import DoorConfig, MessagingService
from ingest_api.grpc.settings import ServerSettings
from ingest_api.grpc.status import Code
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from ingest_api.grpc.v2 import service_pb2_grpc
from store import InvalidArgument, Message, MessageStore, sharding_queue
from tests.grpc.store_port import DoorThread, SettableClock, StorePort
from tests.support.rocketmq5 import run_client
from tests.support.stores import light_config
from tests.support.waiting import wait_until

MAX_BODY = 3 * 1024 * 1024  # not the client's 4 MiB default: proves the settings reply arrived
META = (("x-mq-client-id", "test-client@1"),)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(light_config(tmp_path / "store")) as opened:
        opened.create_topic("orders", 4)
        yield opened


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


@pytest.fixture
def door(store: MessageStore, clock: SettableClock) -> Iterator[tuple[DoorThread, StorePort]]:
    port = StorePort(store)
    config = DoorConfig(settings=ServerSettings(max_body_bytes=MAX_BODY))
    with DoorThread(MessagingService(port, ClientRegistry(clock, expiry_ms=30_000), config)) as running:
        port.port = running.port
        yield running, port


@pytest.fixture
def stub(door: tuple[DoorThread, StorePort]) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{door[0].port}") as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]


def test_the_official_producer_sends_into_the_store(
    door: tuple[DoorThread, StorePort], store: MessageStore, rocketmq5: Path, tmp_path: Path
) -> None:
    running, port = door
    specs = [
        {"body": "first", "tag": "TagA", "keys": ["order-1"], "properties": {"color": "red"}},
        {"body": "second"},
        {"body": "in order", "message_group": "customer-7"},
    ]
    argument = {
        "endpoint": f"127.0.0.1:{running.port}",
        "topic": "orders",
        "messages": specs,
        "expect_max_body_size": MAX_BODY,
    }
    lines = run_client("produce.py", argument, home=tmp_path / "home")
    receipts, [settings] = lines[:-1], lines[-1:]
    assert settings == {"max_body_size": MAX_BODY}  # the Telemetry settings reply was applied
    assert len(receipts) == 3
    # the server picks the queue (the receipt's queue is the client's guess): look up by UNIQ_KEY
    views = [view for q in range(4) for view in store.get_messages("orders", q, 0, 32).messages]
    by_key = {view.uniq_key: view for view in views}
    assert len(by_key) == 3
    stored = []
    for receipt in receipts:
        view = by_key[receipt["message_id"]]  # the client's id is the UNIQ_KEY
        assert receipt["message_id"].startswith("01") and len(receipt["message_id"]) == 34
        assert view.queue_offset == receipt["offset"]
        stored.append(view)
    first, second, fifo = stored
    assert (first.body, first.tags, first.keys) == (b"first", "TagA", ["order-1"])
    assert first.properties["color"] == "red" and first.properties["PGROUP"] == "orders"
    assert "__BORNHOST" in first.properties and "BORN_TIMESTAMP" in first.properties
    assert second.body == b"second" and second.tags is None
    assert fifo.properties["__SHARDINGKEY"] == "customer-7"
    assert fifo.queue_id == sharding_queue("customer-7", 4)
    # producer.shutdown() said NotifyClientTermination: the registry forgot it
    assert len(port.gone) == 1 and len(running.service.registry) == 0


def test_a_call_without_client_id_is_refused(
    stub: service_pb2_grpc.MessagingServiceStub, door: tuple[DoorThread, StorePort]
) -> None:
    request = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
    assert stub.QueryRoute(request).status.code == Code.CLIENT_ID_REQUIRED
    answer = stub.QueryRoute(request, metadata=META)
    assert answer.status.code == Code.OK and [q.id for q in answer.message_queues] == [0, 1, 2, 3]
    brokers = {(q.broker.name, q.broker.id, q.broker.endpoints.scheme) for q in answer.message_queues}
    assert brokers == {("b1", 0, pb.IPv4)}
    ports = {q.broker.endpoints.addresses[0].port for q in answer.message_queues}
    assert ports == {door[0].port}  # the gRPC door's own address
    missing = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="nope")), metadata=META)
    assert missing.status.code == Code.TOPIC_NOT_FOUND
    schedule = spb.QueryRouteRequest(topic=pb.Resource(name="SCHEDULE_TOPIC_XXXX"))
    system = stub.QueryRoute(schedule, metadata=META)
    assert system.status.code == Code.ILLEGAL_TOPIC


def test_offset_rpcs_are_unimplemented(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.QueryOffset(spb.QueryOffsetRequest(), metadata=META)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as streamed:
        list(stub.PullMessage(spb.PullMessageRequest(), metadata=META))
    assert streamed.value.code() == grpc.StatusCode.UNIMPLEMENTED


def receive(
    stub: service_pb2_grpc.MessagingServiceStub, **fields: object
) -> list[spb.ReceiveMessageResponse]:
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        **fields,  # type: ignore[arg-type]
    )
    return list(stub.ReceiveMessage(request, metadata=META, timeout=30))


def test_the_receive_stream_is_a_status_then_a_delivery_timestamp(
    stub: service_pb2_grpc.MessagingServiceStub, door: tuple[DoorThread, StorePort]
) -> None:
    fifteen_s, one_s = Duration(seconds=15), Duration(seconds=1)
    empty = receive(stub, batch_size=100, invisible_duration=fifteen_s, long_polling_timeout=one_s)
    assert [r.WhichOneof("content") for r in empty] == ["status", "delivery_timestamp"]
    assert empty[0].status.code == Code.MESSAGE_NOT_FOUND
    [asked] = door[1].receives
    assert (asked.group, asked.topic, asked.tag_expression) == ("G", "orders", "*")
    assert (asked.max_messages, asked.invisible_ms, asked.wait_ms) == (32, 15_000, 5_000)
    bad = receive(stub, batch_size=1)  # no invisible duration and no auto renew
    assert [r.WhichOneof("content") for r in bad] == ["status", "delivery_timestamp"]
    assert bad[0].status.code == Code.ILLEGAL_INVISIBLE_TIME
    renewing = receive(stub, batch_size=4, auto_renew=True)
    assert renewing[0].status.code == Code.MESSAGE_NOT_FOUND and door[1].receives[-1].invisible_ms is None


def test_telemetry_answers_settings_and_carries_check_backs(
    stub: service_pb2_grpc.MessagingServiceStub, door: tuple[DoorThread, StorePort], store: MessageStore
) -> None:
    service = door[0].service
    assert stub.Heartbeat(spb.HeartbeatRequest(), metadata=META).status.code == Code.UNRECOGNIZED_CLIENT_TYPE
    outbound: queue.Queue[spb.TelemetryCommand | None] = queue.Queue()
    publishing = pb.Publishing(topics=[pb.Resource(name="orders")])
    settings = pb.Settings(client_type=pb.PRODUCER, publishing=publishing)
    outbound.put(spb.TelemetryCommand(settings=settings))
    replies = stub.Telemetry(iter(outbound.get, None), metadata=META, timeout=30)
    reply = next(replies)
    assert reply.status.code == Code.OK and reply.settings.publishing.max_body_size == MAX_BODY
    assert stub.Heartbeat(spb.HeartbeatRequest(client_type=pb.PRODUCER), metadata=META).status.code == Code.OK
    put = store.put_message(Message(topic="orders", body=b"half", uniq_key="01ABC"))
    [half] = store.get_messages("orders", put.queue_id, put.queue_offset, 1).messages
    assert service.push_check_back("orders", half, "tx-1")
    command = next(replies).recover_orphaned_transaction_command
    assert command.transaction_id == "tx-1" and command.message.system_properties.message_id == "01ABC"
    assert not service.push_check_back("other-topic", half, "tx-2")
    outbound.put(None)  # the client closes its side: the stream ends
    assert list(replies) == []


def test_settings_without_publishing_or_subscription_end_the_stream(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    replies = stub.Telemetry(iter([spb.TelemetryCommand(settings=pb.Settings())]), metadata=META, timeout=10)
    with pytest.raises(grpc.RpcError) as caught:
        list(replies)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_every_rpc_of_the_service_is_answered_by_the_door() -> None:
    methods = spb.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name
    base = service_pb2_grpc.MessagingServiceServicer
    assert [name for name in methods if getattr(MessagingService, name) is getattr(base, name)] == []


def test_handle_operations_transactions_and_assignments_answer_in_status(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    group, topic = pb.Resource(name="G"), pb.Resource(name="orders")
    entries = [spb.AckMessageEntry(message_id="m1", receipt_handle="h1")]
    acked = stub.AckMessage(spb.AckMessageRequest(group=group, topic=topic, entries=entries), metadata=META)
    assert acked.status.code == Code.INVALID_RECEIPT_HANDLE
    assert [(e.message_id, e.status.code) for e in acked.entries] == [("m1", Code.INVALID_RECEIPT_HANDLE)]
    change = spb.ChangeInvisibleDurationRequest(
        group=group, topic=topic, receipt_handle="h1", invisible_duration=Duration(seconds=-1)
    )
    assert stub.ChangeInvisibleDuration(change, metadata=META).status.code == Code.ILLEGAL_INVISIBLE_TIME
    change.invisible_duration.seconds = 30
    assert stub.ChangeInvisibleDuration(change, metadata=META).status.code == Code.INVALID_RECEIPT_HANDLE
    end = spb.EndTransactionRequest(topic=topic, message_id="m1", resolution=pb.COMMIT)
    assert stub.EndTransaction(end, metadata=META).status.code == Code.INVALID_TRANSACTION_ID
    end.transaction_id = "tx-1"
    assert stub.EndTransaction(end, metadata=META).status.code == Code.OK
    assigned = stub.QueryAssignment(spb.QueryAssignmentRequest(topic=topic, group=group), metadata=META)
    assert assigned.status.code == Code.OK and [a.message_queue.id for a in assigned.assignments] == [-1]
    retry_group = spb.QueryAssignmentRequest(topic=topic, group=pb.Resource(name="%RETRY%G"))
    assert stub.QueryAssignment(retry_group, metadata=META).status.code == Code.ILLEGAL_CONSUMER_GROUP


def test_a_consumer_gets_its_groups_policy_heartbeats_and_expires(
    stub: service_pb2_grpc.MessagingServiceStub, door: tuple[DoorThread, StorePort], clock: SettableClock
) -> None:
    running, port = door
    subscription = pb.Subscription(group=pb.Resource(name="fifo-G"))
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=subscription)
    replies = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    [reply] = list(replies)  # answered, then the stream ends with the client's side
    assert reply.settings.subscription.fifo and reply.settings.backoff_policy.max_attempts == 17
    beat = spb.HeartbeatRequest(group=pb.Resource(name="fifo-G"), client_type=pb.SIMPLE_CONSUMER)
    assert stub.Heartbeat(beat, metadata=META).status.code == Code.OK and port.heartbeats == ["test-client@1"]
    registry = running.service.registry
    session = registry.get("test-client@1")
    assert session is not None and session.group == "fifo-G" and session.stream is None
    clock.now_ms += 29_000
    assert running.service.registry.expire() == []  # still within its 30 s
    clock.now_ms += 2_000  # now unseen for 31 s: the door's expiry task drops it
    wait_until(lambda: registry.get("test-client@1") is None, what="the door's expiry task")
    assert port.gone == ["test-client@1"]


def test_transactions_of_the_official_producer_and_a_check_back(
    door: tuple[DoorThread, StorePort], store: MessageStore, rocketmq5: Path, tmp_path: Path
) -> None:
    running, port = door
    argument = {"endpoint": f"127.0.0.1:{running.port}", "topic": "orders"}
    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(run_client, "transact.py", argument, tmp_path / "home")
        wait_until(lambda: len(port.halves) == 2 or client.done(), timeout_s=60, what="two half messages")
        orphan_id, orphan_tx = port.halves[1]
        halves = store.get_messages("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 32).messages
        [orphan] = [view for view in halves if view.uniq_key == orphan_id]
        assert orphan.properties["TRAN_MSG"] == "true" and orphan.properties["REAL_TOPIC"] == "orders"
        assert running.service.push_check_back("orders", orphan, orphan_tx)
        lines = client.result(timeout=60)
    committed, left, checked = lines
    assert (committed["committed"], committed["transaction_id"]) == port.halves[0]
    assert (left["orphan"], left["transaction_id"]) == (orphan_id, orphan_tx)
    assert checked == {"checked": [orphan_id], "topics": ["orders"]}  # shown under its real topic
    assert port.ends == [
        ("orders", *port.halves[0], True, False),  # tx.commit(): SOURCE_CLIENT
        ("orders", orphan_id, orphan_tx, True, True),  # the checker's COMMIT: SOURCE_SERVER_CHECK
    ]


def test_a_contradictory_door_config_is_refused() -> None:
    DoorConfig().validate()
    too_big = DoorConfig(settings=ServerSettings(max_body_bytes=8 * 1024 * 1024))
    with pytest.raises(InvalidArgument, match=r"settings\.max_body_bytes"):
        too_big.validate()
    with pytest.raises(InvalidArgument, match="min_long_polling_ms"):
        DoorConfig(receive=ReceiveRules(min_long_polling_ms=30_000)).validate()
    with pytest.raises(InvalidArgument, match="max_batch_size"):
        DoorConfig(receive=ReceiveRules(max_batch_size=0)).validate()
