"""The door's handlers on raw sockets over a real store: what ali-ons never sends (the V1 send
header, batches, the binary header, client UNIQ_KEYs) and the pull and offset edge cases."""

from __future__ import annotations

import socket
import struct
import threading

from ingest_api.remoting.batch import BatchEntry, encode_batch
from ingest_api.remoting.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueRef,
    decode_lock_response,
    decode_route,
    encode_lock_request,
)
from ingest_api.remoting.codec import RemotingCommand, encode_command, request
from ingest_api.remoting.codes import PULL_FLAG_SUSPEND, RequestCode, ResponseCode, SerializeType
from ingest_api.remoting.handlers.clients import ClientRegistry
from ingest_api.remoting.handlers.queue_locks import QueueLocks
from ingest_api.remoting.headers import SendMessageRequest, SendMessageResponse, send_request_ext_fields
from store import Message
from tests.remoting.conftest import Door
from tests.remoting.rawclient import RawClient

UNIQ = "7F0000010F2A0000000000000000000A"


def send_header(topic: str, queue_id: int = 0, properties: str = "", sys_flag: int = 0) -> SendMessageRequest:
    return SendMessageRequest(
        producer_group="PG",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        flag=7,
        properties=properties,
        reconsume_times=0,
    )


def call(door: Door, cmd: RemotingCommand) -> RemotingCommand:
    with RawClient("127.0.0.1", door.door.port) as client:
        client.send(cmd)
        return client.recv()


def test_send_v1_binary_header_keeps_the_client_uniq_key(door: Door) -> None:
    props = f"TAGS\x01t1\x02KEYS\x01a b\x02UNIQ_KEY\x01{UNIQ}\x02WAIT\x01true\x02color\x01red\x02"
    fields = send_request_ext_fields(send_header("V1T", 1, props), v2=False)
    answer = call(
        door, request(RequestCode.SEND_MESSAGE, 3, fields, b"body", serialize_type=SerializeType.ROCKETMQ)
    )
    assert (answer.code, answer.serialize_type, answer.opaque) == (
        ResponseCode.SUCCESS,
        SerializeType.ROCKETMQ,
        3,
    )
    assert answer.ext_fields["transactionId"] == UNIQ and answer.ext_fields["queueId"] == "1"
    view = door.store.get_by_msg_id(answer.ext_fields["msgId"])
    assert view is not None
    # the send answer is written out by hand on the hot path: the same fields, order included,
    # as the typed header renders
    typed = SendMessageResponse(view.msg_id, 1, view.queue_offset, UNIQ).to_ext_fields()
    assert list(answer.ext_fields.items()) == list(typed.items())
    assert (view.topic, view.queue_id, view.body, view.flag) == ("V1T", 1, b"body", 7)
    assert view.properties["UNIQ_KEY"] == UNIQ and view.properties["KEYS"] == "a b"
    assert (view.properties["WAIT"], view.properties["color"], view.properties["TAGS"]) == (
        "true",
        "red",
        "t1",
    )
    assert view.born_timestamp_ms == 1_700_000_000_000 and view.born_host[0] == "127.0.0.1"


def test_send_batch_stores_every_entry(door: Door) -> None:
    entries = [
        BatchEntry(0, f"b{i}".encode(), {"UNIQ_KEY": UNIQ[:-1] + str(i), "TAGS": "bt"}) for i in range(3)
    ]
    fields = {**send_request_ext_fields(send_header("BatchT"), v2=True), "m": "true"}
    answer = call(door, request(RequestCode.SEND_BATCH_MESSAGE, 4, fields, encode_batch(entries)))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    ids = answer.ext_fields["msgId"].split(",")
    views = [door.store.get_by_msg_id(msg_id) for msg_id in ids]
    assert [(v.body, v.properties["UNIQ_KEY"], v.queue_offset) for v in views if v is not None] == [
        (b"b0", UNIQ[:-1] + "0", 0),
        (b"b1", UNIQ[:-1] + "1", 1),
        (b"b2", UNIQ[:-1] + "2", 2),
    ]


def test_send_refusals(door: Door) -> None:
    lz4 = send_request_ext_fields(send_header("RefuseT", sys_flag=0x1 | 0x100), v2=True)
    answer = call(door, request(RequestCode.SEND_MESSAGE_V2, 5, lz4, b"\x00"))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "0x100" in (answer.remark or "")
    bad_queue = send_request_ext_fields(send_header("RefuseT", queue_id=99), v2=True)
    answer = call(door, request(RequestCode.SEND_MESSAGE_V2, 6, bad_queue, b"x"))
    assert answer.code != ResponseCode.SUCCESS and "99" in (answer.remark or "")
    assert door.store.max_offset("RefuseT", 0) == 0


def pull_fields(topic: str, offset: int, suspend_ms: int = 0) -> dict[str, str]:
    return {
        "consumerGroup": "GP",
        "topic": topic,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(PULL_FLAG_SUSPEND if suspend_ms else 0),
        "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subVersion": "0",
    }


def test_pull_offset_moved_and_raw_records(door: Door) -> None:
    door.store.create_topic("PullT", 1)
    put = door.store.put_message(Message("PullT", b"hello", tags="x", queue_id=0))
    answer = call(door, request(RequestCode.PULL_MESSAGE, 7, pull_fields("PullT", 0)))
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body == door.store.read_bytes(put.commitlog_offset, put.size_bytes)
    assert struct.unpack_from(">i", answer.body)[0] == len(answer.body)  # one record: TOTALSIZE
    assert (answer.ext_fields["nextBeginOffset"], answer.ext_fields["maxOffset"]) == ("1", "1")
    moved = call(door, request(RequestCode.PULL_MESSAGE, 8, pull_fields("PullT", 5)))
    assert (moved.code, moved.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_OFFSET_MOVED, "1")
    nothing = call(door, request(RequestCode.PULL_MESSAGE, 9, pull_fields("PullT", 1)))
    assert nothing.code == ResponseCode.PULL_NOT_FOUND and nothing.body == b""


def test_parked_pull_wakes_on_arrival(door: Door) -> None:
    door.store.create_topic("PollT", 1)
    with RawClient("127.0.0.1", door.door.port, timeout_s=8.0) as client:
        client.send(request(RequestCode.PULL_MESSAGE, 10, pull_fields("PollT", 0, suspend_ms=20_000)))
        client.send(request(RequestCode.GET_MIN_OFFSET, 11, {"topic": "PollT", "queueId": "0"}))
        assert client.recv().opaque == 11  # the parked pull holds up nothing on its connection
        threading.Timer(0.2, lambda: door.store.put_message(Message("PollT", b"late", queue_id=0))).start()
        answer = client.recv()  # well before the 20 s suspension ends (the socket times out at 8 s)
    assert (answer.opaque, answer.code, answer.ext_fields["nextBeginOffset"]) == (
        10,
        ResponseCode.SUCCESS,
        "1",
    )


def test_consumer_offsets(door: Door) -> None:
    door.store.create_topic("OffT", 2)
    door.store.put_message(Message("OffT", b"a", queue_id=0))
    query = {"consumerGroup": "GO", "topic": "OffT", "queueId": "0"}
    assert (
        call(door, request(RequestCode.QUERY_CONSUMER_OFFSET, 1, query)).code == ResponseCode.QUERY_NOT_FOUND
    )
    empty = call(door, request(RequestCode.QUERY_CONSUMER_OFFSET, 2, {**query, "queueId": "1"}))
    assert (empty.code, empty.ext_fields) == (ResponseCode.SUCCESS, {"offset": "0"})
    update = request(RequestCode.UPDATE_CONSUMER_OFFSET, 3, {**query, "commitOffset": "1"})
    assert call(door, update).code == ResponseCode.SUCCESS
    assert call(door, request(RequestCode.QUERY_CONSUMER_OFFSET, 4, query)).ext_fields == {"offset": "1"}
    assert call(door, request(RequestCode.GET_MAX_OFFSET, 5, query)).ext_fields == {"offset": "1"}
    search = {"topic": "OffT", "queueId": "0", "timestamp": "0"}
    assert call(door, request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, 6, search)).ext_fields == {
        "offset": "0"
    }


def test_routes(door: Door) -> None:
    door.store.create_topic("RouteT", 3)
    answer = call(door, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "RouteT"}))
    route = decode_route(answer.body)
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(3, 3, 6)]
    assert route.broker_datas[0].broker_addrs == {0: f"127.0.0.1:{door.door.port}"}
    missing = call(door, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 2, {"topic": "%DLQ%G"}))
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST and "%DLQ%G" in (missing.remark or "")
    retry = call(door, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 4, {"topic": "%RETRY%G"}))
    assert [q.write_queue_nums for q in decode_route(retry.body).queue_datas] == [1]
    cluster = call(door, request(RequestCode.GET_BROKER_CLUSTER_INFO, 3))
    assert (
        cluster.code == ResponseCode.SUCCESS
        and b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}' in cluster.body
    )


def test_client_registry_expiry_and_unregister() -> None:
    registry = ClientRegistry(expiry_ms=1000)
    registry.heartbeat(HeartbeatData("b@1", ("PG",), (ConsumerData("G"),)), now_ms=0)
    registry.heartbeat(HeartbeatData("a@1", (), (ConsumerData("G"),)), now_ms=500)
    assert registry.consumer_ids("G", 900) == ["a@1", "b@1"] and registry.producer_ids("PG", 900) == ["b@1"]
    assert registry.consumer_ids("G", 1200) == ["a@1"]  # b's last heartbeat is 1200 ms old
    registry.unregister("a@1", None, "G")
    assert registry.consumer_ids("G", 1200) == [] and registry.expire(1200) == ["b@1"]


def test_bad_frames_store_nothing_and_the_door_keeps_serving(door: Door) -> None:
    door.store.create_topic("BadT", 1)
    fields = send_request_ext_fields(send_header("BadT"), v2=True)
    frame = encode_command(request(RequestCode.SEND_MESSAGE_V2, 1, fields, b"payload"))
    with RawClient("127.0.0.1", door.door.port) as truncated:
        truncated.send_raw(frame[:-3])
        truncated.sock.shutdown(socket.SHUT_WR)
        assert truncated.closed_by_server()
    with RawClient("127.0.0.1", door.door.port) as oversized:
        oversized.send_raw((64 << 20).to_bytes(4, "big") + frame[4:])
        assert oversized.closed_by_server()
    with RawClient("127.0.0.1", door.door.port) as garbage:
        garbage.send_raw(frame[:8] + b"}" + frame[9:])  # the JSON header's first byte broken
        assert garbage.closed_by_server()
    assert door.store.max_offset("BadT", 0) == 0
    assert (
        call(door, request(RequestCode.SEND_MESSAGE_V2, 2, fields, b"payload")).code == ResponseCode.SUCCESS
    )
    result = door.store.get_messages("BadT", 0, 0, 32)
    assert [m.body for m in result.messages] == [b"payload"]


def test_queue_locks_expire_and_belong_to_their_holder() -> None:
    locks = QueueLocks(expiry_ms=1000)
    q0, q1 = MessageQueueRef("T", "broker-a", 0), MessageQueueRef("T", "broker-a", 1)
    assert locks.lock("G", "a@1", [q0, q1], now_ms=0) == [q0, q1]
    assert locks.lock("G", "b@1", [q0, q1], now_ms=500) == []  # held by a
    assert locks.lock("OTHER", "b@1", [q0], now_ms=500) == [q0]  # locks are per group
    locks.unlock("G", "b@1", [q0])  # not b's to release
    assert locks.holder("G", q0, 600) == "a@1"
    assert locks.lock("G", "a@1", [q0], now_ms=900) == [q0]  # renewed at 900
    assert locks.lock("G", "b@1", [q0, q1], now_ms=1700) == [q1]  # q1 expired at 1000, q0 not yet
    locks.unlock("G", "a@1", [q0])
    assert locks.lock("G", "b@1", [q0], now_ms=1701) == [q0]


def test_lock_batch_over_the_wire(door: Door) -> None:
    mqs = (MessageQueueRef("LockT", "broker-a", 0), MessageQueueRef("LockT", "broker-a", 1))
    first = call(
        door,
        request(RequestCode.LOCK_BATCH_MQ, 1, body=encode_lock_request(LockBatchRequest("G", "a@1", mqs))),
    )
    assert decode_lock_response(first.body) == list(mqs)
    other = call(
        door,
        request(RequestCode.LOCK_BATCH_MQ, 2, body=encode_lock_request(LockBatchRequest("G", "b@1", mqs))),
    )
    assert decode_lock_response(other.body) == []
    unlock = request(
        RequestCode.UNLOCK_BATCH_MQ, 3, body=encode_lock_request(LockBatchRequest("G", "a@1", mqs[:1]))
    )
    assert call(door, unlock).code == ResponseCode.SUCCESS
    again = call(
        door,
        request(RequestCode.LOCK_BATCH_MQ, 4, body=encode_lock_request(LockBatchRequest("G", "b@1", mqs))),
    )
    assert decode_lock_response(again.body) == [mqs[0]]


def test_tool_codes(door: Door) -> None:
    create = {
        "topic": "ToolT",
        "defaultTopic": "TBW102",
        "readQueueNums": "2",
        "writeQueueNums": "3",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
    }
    assert call(door, request(RequestCode.UPDATE_AND_CREATE_TOPIC, 1, create)).code == ResponseCode.SUCCESS
    assert door.store.queue_count("ToolT") == 3
    put = door.store.put_message(Message("ToolT", b"find me", keys=("order-9",), queue_id=2))
    viewed = call(door, request(RequestCode.VIEW_MESSAGE_BY_ID, 2, {"offset": str(put.commitlog_offset)}))
    assert viewed.code == ResponseCode.SUCCESS and viewed.body == door.store.read_record(put.commitlog_offset)
    query = {
        "topic": "ToolT",
        "key": "order-9",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": str(2**62),
    }
    found = call(door, request(RequestCode.QUERY_MESSAGE, 3, query))
    assert found.code == ResponseCode.SUCCESS and found.body == viewed.body
    missing = call(door, request(RequestCode.QUERY_MESSAGE, 4, {**query, "key": "nope"}))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    earliest = call(
        door, request(RequestCode.GET_EARLIEST_MSG_STORETIME, 5, {"topic": "ToolT", "queueId": "2"})
    )
    assert earliest.ext_fields == {"timestamp": str(put.store_timestamp_ms)}
    empty = call(door, request(RequestCode.GET_EARLIEST_MSG_STORETIME, 6, {"topic": "ToolT", "queueId": "0"}))
    assert empty.ext_fields == {"timestamp": "-1"}
    gone = call(door, request(RequestCode.VIEW_MESSAGE_BY_ID, 7, {"offset": str(10**12)}))
    assert gone.code == ResponseCode.SYSTEM_ERROR
