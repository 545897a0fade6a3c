"""The gRPC door on a real socket over the real broker (uvicorn, the store, POP, the
transaction board: ``GrpcCompanion`` with ``BrokerPort``): the official RocketMQ 5 Producer sends
through it, and raw calls with our generated stub check metadata, routes, the receive stream's
shape, the Telemetry exchange, refusals in ``status`` and the RPCs that are not served."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.companion import GrpcCompanion
from ingest_api.grpc.requests import ReceiveRules
from ingest_api.grpc.server import DoorConfig, MessagingService
from ingest_api.grpc.settings import ServerSettings
from ingest_api.grpc.status import Code
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from ingest_api.grpc.v2 import service_pb2_grpc
from store import InvalidArgument, Message, MessageStore, sharding_queue
from tests.grpc.door_fixtures import DoorBroker, SettableClock, start_door_broker
from tests.support.rocketmq5 import run_client
from tests.support.waiting import wait_until

MAX_BODY = 3 * 1024 * 1024  # not the client's 4 MiB default: proves the settings reply arrived
META = (("x-mq-client-id", "test-client@1"),)


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


@pytest.fixture
def door(tmp_path: Path, clock: SettableClock) -> Iterator[DoorBroker]:
    """A broker that creates no topic by itself, with topic ``orders`` (4 queues) and a door
    whose registry runs on ``clock`` (expiry checked every 50 ms)."""
    config = DoorConfig(settings=ServerSettings(max_body_bytes=MAX_BODY))
    companion = GrpcCompanion(port=0, config=config, clock_ms=clock, expiry_check_s=0.05)
    running = start_door_broker(tmp_path / "store", tmp_path / "home", companion, auto_create_topics=False)
    running.broker.store.create_topic("orders", 4)
    try:
        yield running
    finally:
        running.running.stop()


@pytest.fixture
def store(door: DoorBroker) -> MessageStore:
    return door.broker.store


@pytest.fixture
def service(door: DoorBroker) -> MessagingService:
    assert door.companion.door is not None
    return door.companion.door.service


@pytest.fixture
def stub(door: DoorBroker) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(door.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]


def test_the_official_producer_sends_into_the_store(
    door: DoorBroker, store: MessageStore, service: MessagingService, rocketmq5: Path, tmp_path: Path
) -> None:
    specs = [
        {"body": "first", "tag": "TagA", "keys": ["order-1"], "properties": {"color": "red"}},
        {"body": "second"},
        {"body": "in order", "message_group": "customer-7"},
    ]
    argument = {
        "endpoint": door.endpoint,
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
    assert len(service.registry) == 0


def test_a_call_without_client_id_is_refused(
    stub: service_pb2_grpc.MessagingServiceStub, door: DoorBroker
) -> None:
    request = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
    assert stub.QueryRoute(request).status.code == Code.CLIENT_ID_REQUIRED
    answer = stub.QueryRoute(request, metadata=META)
    assert answer.status.code == Code.OK and [q.id for q in answer.message_queues] == [0, 1, 2, 3]
    brokers = {(q.broker.name, q.broker.id, q.broker.endpoints.scheme) for q in answer.message_queues}
    assert brokers == {("local", 0, pb.IPv4)}  # a lone broker answers itself
    ports = {q.broker.endpoints.addresses[0].port for q in answer.message_queues}
    assert ports == {int(door.endpoint.rsplit(":")[1])}  # the gRPC door's own address
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
    stub: service_pb2_grpc.MessagingServiceStub, store: MessageStore
) -> None:
    fifteen_s, one_s = Duration(seconds=15), Duration(seconds=1)
    empty = receive(stub, batch_size=100, invisible_duration=fifteen_s, long_polling_timeout=one_s)
    assert [r.WhichOneof("content") for r in empty] == ["status", "delivery_timestamp"]
    assert empty[0].status.code == Code.MESSAGE_NOT_FOUND
    bad = receive(stub, batch_size=1)  # no invisible duration and no auto renew
    assert [r.WhichOneof("content") for r in bad] == ["status", "delivery_timestamp"]
    assert bad[0].status.code == Code.ILLEGAL_INVISIBLE_TIME
    short = receive(stub, batch_size=1, invisible_duration=Duration(nanos=500_000_000))
    assert short[0].status.code == Code.ILLEGAL_INVISIBLE_TIME  # POP's minimum is 1 s
    store.put_messages([Message(topic="orders", body=b"m%d" % i, queue_id=i % 4) for i in range(40)])
    found = receive(stub, batch_size=100, invisible_duration=fifteen_s)  # clamped to 32
    kinds = [r.WhichOneof("content") for r in found]
    assert kinds == ["status", *["message"] * 32, "delivery_timestamp"] and found[0].status.code == Code.OK
    handles = {r.message.system_properties.receipt_handle for r in found[1:-1]}
    assert len(handles) == 32 and all(r.message.system_properties.delivery_attempt == 1 for r in found[1:-1])
    renewing = receive(stub, batch_size=32, auto_renew=True)  # the other 8, for 60 s
    assert [r.WhichOneof("content") for r in renewing].count("message") == 8


def test_telemetry_answers_settings_and_carries_check_backs(
    stub: service_pb2_grpc.MessagingServiceStub, service: MessagingService, store: MessageStore
) -> None:
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
    end.transaction_id = "tx-1"  # no such transaction
    assert stub.EndTransaction(end, metadata=META).status.code == Code.INVALID_TRANSACTION_ID
    assigned = stub.QueryAssignment(spb.QueryAssignmentRequest(topic=topic, group=group), metadata=META)
    assert assigned.status.code == Code.OK and [a.message_queue.id for a in assigned.assignments] == [-1]
    retry_group = spb.QueryAssignmentRequest(topic=topic, group=pb.Resource(name="%RETRY%G"))
    assert stub.QueryAssignment(retry_group, metadata=META).status.code == Code.ILLEGAL_CONSUMER_GROUP


def test_a_consumer_gets_its_groups_policy_heartbeats_and_expires(
    stub: service_pb2_grpc.MessagingServiceStub,
    door: DoorBroker,
    service: MessagingService,
    clock: SettableClock,
) -> None:
    door.broker.pop.configure_group("fifo-G", fifo=True)
    subscription = pb.Subscription(group=pb.Resource(name="fifo-G"))
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=subscription)
    replies = stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10)
    [reply] = list(replies)  # answered, then the stream ends with the client's side
    assert reply.settings.subscription.fifo and reply.settings.backoff_policy.max_attempts == 17
    beat = spb.HeartbeatRequest(group=pb.Resource(name="fifo-G"), client_type=pb.SIMPLE_CONSUMER)
    clock.now_ms += 5_000
    assert stub.Heartbeat(beat, metadata=META).status.code == Code.OK
    registry = service.registry
    session = registry.get("test-client@1")
    assert session is not None and session.group == "fifo-G" and session.stream is None
    assert session.last_seen_ms == clock.now_ms  # the heartbeat refreshed it
    clock.now_ms += 29_000
    assert registry.expire() == []  # still within its 30 s
    clock.now_ms += 2_000  # now unseen for 31 s: the door's expiry task drops it
    wait_until(lambda: registry.get("test-client@1") is None, what="the door's expiry task")


def test_transactions_of_the_official_producer_and_a_check_back(
    door: DoorBroker, service: MessagingService, store: MessageStore, rocketmq5: Path, tmp_path: Path
) -> None:
    assert door.broker.operators is not None and door.broker.operators.transactions is not None
    transactions = door.broker.operators.transactions.service
    argument = {"endpoint": door.endpoint, "topic": "orders"}
    with ThreadPoolExecutor(1) as pool:
        client = pool.submit(run_client, "transact.py", argument, tmp_path / "home")

        def orphan_sent() -> bool:  # the committed one ended, the orphan still open
            return len(transactions.transactions("orders")) == 2 and len(transactions.pending("orders")) == 1

        wait_until(lambda: orphan_sent() or client.done(), timeout_s=60, what="the open transaction")
        [pending] = transactions.pending("orders")
        orphan_tx = pending.transaction_id
        halves = store.get_messages("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 32).messages
        [orphan] = [view for view in halves if view.uniq_key == orphan_tx]
        assert orphan.properties["TRAN_MSG"] == "true" and orphan.properties["REAL_TOPIC"] == "orders"
        assert orphan.properties["__transactionId__"] == orphan_tx and orphan.properties["PGROUP"] == "orders"
        assert service.push_check_back("orders", orphan, orphan_tx)
        lines = client.result(timeout=60)
    committed, left, checked = lines
    assert committed["transaction_id"] == committed["committed"]  # the id is the message id
    assert (left["orphan"], left["transaction_id"]) == (orphan_tx, orphan_tx)
    assert checked == {"checked": [orphan_tx], "topics": ["orders"]}  # shown under its real topic
    wait_until(lambda: not transactions.pending("orders"), what="the check-back's commit")
    visible = [str(v.uniq_key) for q in range(4) for v in store.get_messages("orders", q, 0, 32).messages]
    assert sorted(visible) == sorted([committed["committed"], orphan_tx])


def test_a_contradictory_door_config_is_refused() -> None:
    DoorConfig().validate()
    too_big = DoorConfig(settings=ServerSettings(max_body_bytes=8 * 1024 * 1024))
    with pytest.raises(InvalidArgument, match=r"settings\.max_body_bytes"):
        too_big.validate()
    with pytest.raises(InvalidArgument, match="min_long_polling_ms"):
        DoorConfig(receive=ReceiveRules(min_long_polling_ms=30_000)).validate()
    with pytest.raises(InvalidArgument, match="max_batch_size"):
        DoorConfig(receive=ReceiveRules(max_batch_size=0)).validate()


def ack(stub: service_pb2_grpc.MessagingServiceStub, group: str, *handles: str) -> spb.AckMessageResponse:
    entries = [spb.AckMessageEntry(message_id=f"m{i}", receipt_handle=h) for i, h in enumerate(handles)]
    request = spb.AckMessageRequest(
        group=pb.Resource(name=group), topic=pb.Resource(name="orders"), entries=entries
    )
    answer: spb.AckMessageResponse = stub.AckMessage(request, metadata=META)
    return answer


def test_forged_stale_and_foreign_handles_are_refused_and_change_nothing(
    stub: service_pb2_grpc.MessagingServiceStub, store: MessageStore
) -> None:
    store.put_messages(
        [Message(topic="orders", body=b"a", queue_id=0), Message(topic="orders", body=b"b", queue_id=1)]
    )
    got = receive(stub, batch_size=2, invisible_duration=Duration(seconds=30))
    first, second = (r.message.system_properties.receipt_handle for r in got[1:-1])
    forged = first[:-2] + ("A" if first[-2] != "A" else "B") + first[-1]
    assert ack(stub, "G", forged).entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
    assert ack(stub, "H", first).entries[0].status.code == Code.INVALID_RECEIPT_HANDLE  # another group's
    mixed = ack(stub, "G", first, "not a handle")
    assert mixed.status.code == Code.MULTIPLE_RESULTS
    assert [e.status.code for e in mixed.entries] == [Code.OK, Code.INVALID_RECEIPT_HANDLE]
    # acked already: acks are idempotent (a retry whose first answer was lost is answered OK, and
    # changes nothing); changing its invisible time is refused
    assert ack(stub, "G", first).status.code == Code.OK
    change = spb.ChangeInvisibleDurationRequest(
        group=pb.Resource(name="G"), topic=pb.Resource(name="orders"), receipt_handle=first
    )
    change.invisible_duration.seconds = 30
    assert stub.ChangeInvisibleDuration(change, metadata=META).status.code == Code.INVALID_RECEIPT_HANDLE
    forward = spb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="orders"),
        receipt_handle=second,
        delivery_attempt=1,
    )
    assert stub.ForwardMessageToDeadLetterQueue(forward, metadata=META).status.code == Code.OK
    [dead] = store.get_messages("%DLQ%G", 0, 0, 32).messages
    assert dead.body == b"b" and dead.properties["RETRY_TOPIC"] == "orders"
    assert ack(stub, "G", second).status.code == Code.INVALID_RECEIPT_HANDLE  # dead-lettered: done
    # nothing was half-done by the refusals: no message comes back
    again = receive(
        stub, batch_size=32, invisible_duration=Duration(seconds=30), long_polling_timeout=Duration(seconds=5)
    )
    assert again[0].status.code == Code.MESSAGE_NOT_FOUND


def test_parked_receives_hold_no_worker_thread(
    stub: service_pb2_grpc.MessagingServiceStub, door: DoorBroker
) -> None:
    """60 long polls (more than AnyIO's 40 worker threads) wait on the event loop: an HTTP
    produce is still answered at once, and one of the polls gets the message."""
    five_s = Duration(seconds=5)
    with ThreadPoolExecutor(60) as pool, door.http() as http:
        polls = [
            pool.submit(receive, stub, batch_size=1, invisible_duration=five_s, long_polling_timeout=five_s)
            for _ in range(60)
        ]
        wait_until(lambda: len(door.broker.pop._wake_listeners) == 60, what="60 parked receives")
        started = time.monotonic()
        assert http.post("/topics/orders/messages", json={"body": "wake one"}).status_code == 201
        assert time.monotonic() - started < 1.0
        answers = [poll.result(timeout=30) for poll in polls]
    delivered = [r.message.body for answer in answers for r in answer if r.WhichOneof("content") == "message"]
    assert delivered == [b"wake one"]


def test_a_terminated_push_consumer_releases_what_it_held(
    stub: service_pb2_grpc.MessagingServiceStub, store: MessageStore
) -> None:
    subscription = pb.Subscription(group=pb.Resource(name="G"))
    settings = pb.Settings(client_type=pb.PUSH_CONSUMER, subscription=subscription)
    list(stub.Telemetry(iter([spb.TelemetryCommand(settings=settings)]), metadata=META, timeout=10))
    store.put_message(Message(topic="orders", body=b"held", queue_id=0))
    held = receive(stub, batch_size=32, auto_renew=True)  # hidden for 60 s
    assert [r.message.body for r in held if r.WhichOneof("content") == "message"] == [b"held"]
    notify = spb.NotifyClientTerminationRequest(group=pb.Resource(name="G"))
    assert stub.NotifyClientTermination(notify, metadata=META).status.code == Code.OK
    started = time.monotonic()
    again = receive(stub, batch_size=32, invisible_duration=Duration(seconds=30))
    messages = [r.message for r in again if r.WhichOneof("content") == "message"]
    assert [(m.body, m.system_properties.delivery_attempt) for m in messages] == [(b"held", 2)]
    assert time.monotonic() - started < 5  # released at termination, not after its 60 s
