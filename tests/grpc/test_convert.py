"""Conversions both ways (stored <-> ``apache.rocketmq.v2.Message``) and the send refusals."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from ingest_api.grpc.convert import SendLimits, from_proto, from_send_request, message_type_of, to_proto
from ingest_api.grpc.status import Code, GrpcRefusal
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from store import MessageStore, MessageView
from tests.grpc.golden import STORED_VIEW
from tests.support.stores import light_config

NOW_MS = 1_700_000_000_000
PEER = ("192.0.2.7", 50123)


def stamp(ms: int) -> Timestamp:
    value = Timestamp()
    value.FromMilliseconds(ms)
    return value


def sent(**system: object) -> pb.Message:
    """A message as the Python producer builds it, with ``system`` properties overridden."""
    fields: dict[str, object] = {
        "message_id": "01C0A8000100003A6B0B000000000001AA",
        "message_type": pb.NORMAL,
        "born_timestamp": stamp(NOW_MS - 5),
        "born_host": "10.1.2.3",
        "body_encoding": pb.IDENTITY,
        "tag": "TagA",
        "keys": ["k1", "k2"],
    } | system
    return pb.Message(
        topic=pb.Resource(name="orders"),
        user_properties={"color": "red"},
        system_properties=pb.SystemProperties(**fields),  # type: ignore[arg-type]
        body=b"payload",
    )


def view_with(properties: dict[str, str], **fields: object) -> MessageView:
    return dataclasses.replace(STORED_VIEW, properties=properties, **fields)  # type: ignore[arg-type]


# --- stored -> v2.Message -----------------------------------------------------------------------


def test_a_stored_message_becomes_the_proxys_message() -> None:
    message = to_proto(STORED_VIEW, now_ms=NOW_MS, receipt_handle="handle-1")
    system = message.system_properties
    assert message.topic.name == "T" and message.body == b"hi"
    assert dict(message.user_properties) == {"color": "red"}
    assert (system.tag, list(system.keys), system.message_id) == ("a", ["k1", "k2"], "01AB")
    assert system.body_digest.type == pb.MD5
    assert system.body_digest.checksum == hashlib.md5(b"hi").hexdigest().upper()
    assert system.body_encoding == pb.IDENTITY and system.message_type == pb.NORMAL
    assert system.born_timestamp.ToMilliseconds() == 1000 and system.born_host == "10.0.0.1"
    assert system.store_timestamp.ToMilliseconds() == 2500 and system.store_host == "10.0.0.2:10911"
    assert (system.queue_id, system.queue_offset, system.delivery_attempt) == (1, 7, 1)
    assert system.receipt_handle == "handle-1"
    assert not system.HasField("delivery_timestamp") and not system.HasField("message_group")
    assert not system.HasField("dead_letter_queue")


def test_system_properties_of_rocketmq_5_stay_out_of_user_properties() -> None:
    props = {"color": "red", "__BORNHOST": "10.9.9.9", "BORN_TIMESTAMP": "1", "PGROUP": "o", "POP_CK": "x"}
    message = to_proto(view_with(props), now_ms=NOW_MS)
    assert dict(message.user_properties) == {"color": "red"}
    assert message.system_properties.born_host == "10.9.9.9"  # the producer's own report wins


def test_message_id_falls_back_to_the_offset_msg_id() -> None:
    assert to_proto(view_with({}), now_ms=NOW_MS).system_properties.message_id == STORED_VIEW.msg_id


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({"TRAN_MSG": "true", "__SHARDINGKEY": "g"}, pb.TRANSACTION),
        ({"DELAY": "3"}, pb.DELAY),
        ({"TIMER_DELIVER_MS": "5"}, pb.DELAY),
        ({"TIMER_DELAY_SEC": "5", "__SHARDINGKEY": "g"}, pb.DELAY),
        ({"__SHARDINGKEY": "g"}, pb.FIFO),
        ({"TRAN_MSG": "false"}, pb.NORMAL),
        ({}, pb.NORMAL),
    ],
)
def test_message_type_from_stored_properties(props: dict[str, str], expected: int) -> None:
    assert message_type_of(props) == expected


def test_delivery_group_attempt_trace_and_dead_letter_fields() -> None:
    props = {
        "TIMER_DELIVER_MS": str(NOW_MS + 60_000),
        "__SHARDINGKEY": "order-42",
        "TRACE_CONTEXT": "00-abc-01",
        "DLQ_ORIGIN_TOPIC": "orders",
        "DLQ_ORIGIN_MESSAGE_ID": "01AB",
    }
    system = to_proto(view_with(props, reconsume_times=3), now_ms=NOW_MS).system_properties
    assert system.delivery_timestamp.ToMilliseconds() == NOW_MS + 60_000
    assert system.message_group == "order-42" and system.trace_context == "00-abc-01"
    assert system.delivery_attempt == 4
    assert (system.dead_letter_queue.topic, system.dead_letter_queue.message_id) == ("orders", "01AB")


def test_timer_delay_seconds_are_dated_from_now_and_bad_timers_are_left_out() -> None:
    relative = to_proto(view_with({"TIMER_DELAY_SEC": "30"}), now_ms=NOW_MS).system_properties
    assert relative.delivery_timestamp.ToMilliseconds() == NOW_MS + 30_000
    broken = to_proto(view_with({"TIMER_DELIVER_MS": "soon"}), now_ms=NOW_MS).system_properties
    assert not broken.HasField("delivery_timestamp") and broken.message_type == pb.DELAY


# --- SendMessage -> store.Message --------------------------------------------------------------------


def test_a_sent_normal_message_keeps_the_clients_id_and_the_proxys_properties() -> None:
    message = from_proto(sent(), peer=PEER, now_ms=NOW_MS)
    assert (message.topic, message.body) == ("orders", b"payload")
    assert (message.tags, message.keys) == ("TagA", ("k1", "k2"))
    assert message.uniq_key == "01C0A8000100003A6B0B000000000001AA"
    assert message.born_host == PEER and message.born_timestamp_ms == NOW_MS - 5
    assert not message.transaction_prepared
    assert dict(message.properties) == {
        "color": "red",
        "RECONSUME_TIME": "0",
        "PGROUP": "orders",
        "__BORNHOST": "10.1.2.3",
        "BORN_TIMESTAMP": str(NOW_MS - 5),
    }


def test_fifo_delay_transaction_and_trace_properties() -> None:
    message = from_proto(
        sent(
            message_type=pb.TRANSACTION,
            message_group="order-42",
            delivery_timestamp=stamp(NOW_MS + 10_000),
            trace_context="00-abc-01",
            orphaned_transaction_recovery_duration=Duration(seconds=30),
            born_host="",
        ),
        peer=PEER,
        now_ms=NOW_MS,
    )
    props = dict(message.properties)
    assert message.transaction_prepared and props["TRAN_MSG"] == "true"
    assert props["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"
    assert props["TIMER_DELIVER_MS"] == str(NOW_MS + 10_000)
    assert props["__SHARDINGKEY"] == "order-42" and props["TRACE_CONTEXT"] == "00-abc-01"
    assert props["__BORNHOST"] == "192.0.2.7:50123"  # no born host sent: the peer's address


def test_a_gzip_body_is_stored_inflated() -> None:
    message = sent(body_encoding=pb.GZIP)
    message.body = gzip.compress(b"payload")
    assert from_proto(message, peer=PEER, now_ms=NOW_MS).body == b"payload"


def test_a_converted_message_round_trips_through_a_real_store(tmp_path: Path) -> None:
    with MessageStore.open(light_config(tmp_path / "store")) as store:
        put = store.put_message(from_proto(sent(message_group="g1"), peer=PEER, now_ms=NOW_MS))
        view = store.get_messages("orders", put.queue_id, put.queue_offset, 1).messages[0]
    assert put.uniq_key == "01C0A8000100003A6B0B000000000001AA"
    back = to_proto(view, now_ms=NOW_MS)
    assert back.system_properties.message_id == put.uniq_key
    assert back.system_properties.message_type == pb.FIFO and back.system_properties.message_group == "g1"
    assert (back.system_properties.tag, list(back.system_properties.keys)) == ("TagA", ["k1", "k2"])
    assert back.system_properties.born_host == "10.1.2.3" and back.body == b"payload"
    # as the proxy: __SHARDINGKEY is not in RocketMQ 5's system set, so it shows as a user property
    assert dict(back.user_properties) == {"color": "red", "__SHARDINGKEY": "g1"}


# --- refusals ------------------------------------------------------------------------------------


def refused(message: pb.Message, limits: SendLimits) -> GrpcRefusal:
    with pytest.raises(GrpcRefusal) as caught:
        from_proto(message, peer=PEER, now_ms=NOW_MS, limits=limits)
    return caught.value


def with_body(body: bytes, **system: object) -> pb.Message:
    message = sent(**system)
    message.body = body
    return message


def with_user(properties: dict[str, str]) -> pb.Message:
    message = sent()
    message.user_properties.clear()
    message.user_properties.update(properties)
    return message


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (with_body(b""), Code.MESSAGE_BODY_EMPTY),
        (with_body(b"x" * 11), Code.MESSAGE_BODY_TOO_LARGE),
        (with_body(b"not gzip", body_encoding=pb.GZIP), Code.MESSAGE_CORRUPTED),
        (sent(message_id=""), Code.ILLEGAL_MESSAGE_ID),
        (sent(message_id="  "), Code.ILLEGAL_MESSAGE_ID),
        (with_user({"UNIQ_KEY": "forged"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (with_user({"__BORNHOST": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (with_user({"bad\nname": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (with_user({"name": "bad\x00value"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (with_user({f"p{i}": "v" for i in range(129)}), Code.MESSAGE_PROPERTIES_TOO_LARGE),
        (with_user({"big": "v" * 16 * 1024}), Code.MESSAGE_PROPERTIES_TOO_LARGE),
        (sent(tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (sent(tag="   "), Code.ILLEGAL_MESSAGE_TAG),
        (sent(tag=" a"), Code.ILLEGAL_MESSAGE_TAG),
        (sent(tag="a\tb"), Code.ILLEGAL_MESSAGE_TAG),
        (sent(keys=["ok", " "]), Code.ILLEGAL_MESSAGE_KEY),
        (sent(keys=["has space"]), Code.ILLEGAL_MESSAGE_KEY),
        (sent(keys=["ctl\x7f"]), Code.ILLEGAL_MESSAGE_KEY),
        (sent(message_group="g" * 64), Code.ILLEGAL_MESSAGE_GROUP),
        (sent(message_group=" "), Code.ILLEGAL_MESSAGE_GROUP),
        (sent(delivery_timestamp=stamp(NOW_MS + 24 * 3600 * 1000 + 1)), Code.ILLEGAL_DELIVERY_TIME),
        (
            sent(message_type=pb.TRANSACTION, orphaned_transaction_recovery_duration=Duration(seconds=3601)),
            Code.BAD_REQUEST,
        ),
    ],
)
def test_refusals_carry_the_proxys_codes(message: pb.Message, code: int) -> None:
    refusal = refused(message, SendLimits(max_body_bytes=10))
    assert refusal.status_code == code, refusal.message
    assert refusal.message


def test_the_limits_are_inclusive_where_the_proxy_is() -> None:
    from_proto(with_body(b"x" * 10), peer=PEER, now_ms=NOW_MS, limits=SendLimits(max_body_bytes=10))
    from_proto(sent(message_group="g" * 63), peer=PEER, now_ms=NOW_MS)
    from_proto(sent(delivery_timestamp=stamp(NOW_MS + 24 * 3600 * 1000)), peer=PEER, now_ms=NOW_MS)


def test_a_request_is_one_topic_and_not_a_system_topic() -> None:
    def request(*topics: str) -> spb.SendMessageRequest:
        messages = [sent() for _ in topics]
        for message, topic in zip(messages, topics, strict=True):
            message.topic.name = topic
        return spb.SendMessageRequest(messages=messages)

    assert len(from_send_request(request("orders", "orders"), peer=PEER, now_ms=NOW_MS)) == 2
    for bad, code in [
        (request(), Code.MESSAGE_CORRUPTED),
        (request("orders", "other"), Code.MESSAGE_CORRUPTED),
        (request("bad topic!"), Code.ILLEGAL_TOPIC),
        (request("RMQ_SYS_TRANS_HALF_TOPIC"), Code.ILLEGAL_TOPIC),
    ]:
        with pytest.raises(GrpcRefusal) as caught:
            from_send_request(bad, peer=PEER, now_ms=NOW_MS)
        assert caught.value.status_code == code
