"""RocketMQ's ACL on the remoting door: every request signed with a user's access key
(:mod:`broker.security.remoting_signature`) and authorized per request code
(:mod:`ingest_api.remoting.authz`), against a real broker with a users file.

The real ali-ons client signs with ``accessKeyId`` / ``accessKeySecret``; the raw-socket cases
sign with our own signer (checked against ali-ons's in ``tests/security/test_remoting_signature``)
and then break one thing each. A refusal is RocketMQ 5's: NO_PERMISSION (16) with its remark.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.security.remoting_signature import ACCESS_KEY, SIGNATURE, sign_request
from ingest_api.remoting.authz import NEEDS
from ingest_api.remoting.bodies import HeartbeatData, encode_heartbeat
from ingest_api.remoting.codec import RemotingCommand, request
from ingest_api.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode, SerializeType
from ingest_api.remoting.handlers import _HANDLERS
from ingest_api.remoting.headers import (
    GetMaxOffsetRequest,
    GetRouteInfoRequest,
    OffsetResponse,
    SendMessageRequest,
    send_request_ext_fields,
)
from tests.remoting.conftest import Door, running_door
from tests.remoting.rawclient import RawClient
from tests.support.ons import run_producer, start_consumer
from tests.support.waiting import wait_until

TOPIC = "acl-orders"
GROUP = "acl-group"
#: access key -> secret key of each user of the file.
KEYS = {
    "AKALICE01": "alice-secret-key-1",
    "AKMALLORY1": "mallory-secret-key-1",
    "AKROOT001": "root-secret-key-1",
}
USERS = {
    "users": [
        {"name": "alice", "access_keys": [{"access_key": "AKALICE01", "secret_key": KEYS["AKALICE01"]}],
         "produce": ["acl-*"], "consume": ["acl-*"]},
        {"name": "mallory", "access_keys": [{"access_key": "AKMALLORY1", "secret_key": KEYS["AKMALLORY1"]}],
         "consume": ["acl-*"]},
        {"name": "root", "access_keys": [{"access_key": "AKROOT001", "secret_key": KEYS["AKROOT001"]}],
         "superuser": True},
    ]
}  # fmt: skip
LOGGERS = ("", "broker", "ingest_api", "sparkmq", "store", "asyncio")


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Door]:
    users = tmp_path / "users.json"
    users.write_text(json.dumps(USERS))
    os.chmod(users, 0o600)
    with running_door(tmp_path, auth_file=users) as running:
        yield running


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every logger at DEBUG into ``caplog`` for the whole test."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in LOGGERS]
    for logger, _ in saved:
        logger.setLevel(logging.DEBUG)
    caplog.handler.setLevel(logging.DEBUG)
    yield caplog
    for logger, level in saved:
        logger.setLevel(level)


def ons_keys(access_key: str, secret_key: str | None = None) -> dict[str, Any]:
    return {"clientOptions": {"accessKeyId": access_key, "accessKeySecret": secret_key or KEYS[access_key]}}


def signed(
    code: int,
    fields: dict[str, str],
    body: bytes = b"",
    access_key: str = "AKALICE01",
    *,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    """A request signed as a client would (``AccessKey`` added, then ``Signature``)."""
    with_key = {**fields, ACCESS_KEY: access_key}
    signature = sign_request(with_key, body, KEYS[access_key].encode())
    return request(code, 1, {**with_key, SIGNATURE: signature}, body, serialize_type=serialize_type)


def send_fields(topic: str = TOPIC, queue_id: int = 0) -> dict[str, str]:
    header = SendMessageRequest(
        producer_group="acl-pg", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=0, born_timestamp=1_700_000_000_000, flag=0, properties=None,
    )  # fmt: skip
    return send_request_ext_fields(header, v2=True)


def ask(secured: Door, cmd: RemotingCommand) -> RemotingCommand:
    with RawClient("127.0.0.1", secured.door.port) as client:
        client.send(cmd)
        return client.recv()


def max_offset_as_root(secured: Door, topic: str, queue_id: int) -> int:
    fields = GetMaxOffsetRequest(topic=topic, queue_id=queue_id).to_ext_fields()
    answer = ask(secured, signed(RequestCode.GET_MAX_OFFSET, fields, access_key="AKROOT001"))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return OffsetResponse.from_ext_fields(answer.ext_fields).offset


def assert_refused(answer: RemotingCommand, remark: str) -> None:
    assert (answer.code, answer.remark) == (ResponseCode.NO_PERMISSION, remark)


def test_ali_ons_producer_and_consumer_work_with_an_access_key(secured: Door, debug_logs: Any) -> None:
    messages = [{"body": f"signed-{i}", "tags": "a"} for i in range(3)]
    sent = run_producer(secured.name_srv, TOPIC, messages, producer_group="acl-pg", **ons_keys("AKALICE01"))
    assert [s["sendStatus"] for s in sent] == ["SEND_OK"] * 3
    consumer = start_consumer(secured.name_srv, GROUP, TOPIC, instanceName="c1", expect=3, timeoutMs=30000,
                              **ons_keys("AKALICE01"))  # fmt: skip
    try:
        received = consumer.wait_done(45.0)
    finally:
        consumer.stop()
    assert sorted(m["body"] for m in received) == [f"signed-{i}" for i in range(3)]
    assert_no_secret_logged(debug_logs, [])


def assert_no_secret_logged(logs: pytest.LogCaptureFixture, signatures: list[str]) -> None:
    """No secret key (as text, base64 or hex), no signature, no dumped extFields in any record."""
    text = "\n".join(record.getMessage() for record in logs.records)
    assert text  # DEBUG was on: the door logged something
    assert SIGNATURE not in text  # no request's extFields were written out
    for secret in [*KEYS.values(), *signatures]:
        for form in (secret, base64.b64encode(secret.encode()).decode(), secret.encode().hex()):
            assert form not in text


def test_ali_ons_with_a_wrong_secret_is_refused(secured: Door) -> None:
    with pytest.raises(AssertionError) as refused:
        run_producer(secured.name_srv, TOPIC, [{"body": "x"}], **ons_keys("AKALICE01", "not-the-secret"))
    assert '"code":16' in str(refused.value) and "check signature failed." in str(refused.value)
    assert not secured.store.has_topic(TOPIC)  # not even the route lookup got through


def test_a_user_without_the_right_stores_nothing(secured: Door, debug_logs: Any) -> None:
    """mallory may read acl-* (so the route lookup passes) but not write: the send is refused
    (ali-ons would retry NO_PERMISSION on another broker, as the Java client; with one broker it
    gives up) and a superuser sees no message."""
    lookup = GetRouteInfoRequest(topic=TOPIC).to_ext_fields()  # root's lookup creates the topic
    assert ask(secured, signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup, access_key="AKROOT001")).code == 0
    with pytest.raises(AssertionError) as refused:
        run_producer(secured.name_srv, TOPIC, [{"body": "forbidden"}], **ons_keys("AKMALLORY1"))
    assert "Send [4] times, still failed" in str(refused.value)
    why = "User:mallory has no permission to access Topic:acl-orders from 127.0.0.1, write is not allowed."
    refusals = [r.getMessage() for r in debug_logs.records if r.getMessage().endswith(why)]
    assert refusals and all("SEND_MESSAGE_V2(310)" in line for line in refusals)  # one broker: one try
    queues = secured.store.queue_count(TOPIC)
    assert [max_offset_as_root(secured, TOPIC, q) for q in range(queues)] == [0] * queues


def test_raw_requests_without_a_valid_signature_are_refused(secured: Door, debug_logs: Any) -> None:
    route = {"topic": TOPIC}
    body = b"hello"
    good = signed(RequestCode.SEND_MESSAGE_V2, send_fields(), body)
    unsigned = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, route)
    assert_refused(ask(secured, unsigned), "username cannot be null.")
    no_signature = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {**route, ACCESS_KEY: "AKALICE01"})
    assert_refused(ask(secured, no_signature), "check signature failed.")
    tampered = RemotingCommand(**{**_fields(good), "body": b"hellO"})
    assert_refused(ask(secured, tampered), "check signature failed.")
    unknown = request(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {**route, ACCESS_KEY: "NOSUCHKEY", SIGNATURE: "AAAA"}
    )
    assert_refused(ask(secured, unknown), "User:NOSUCHKEY is not found.")
    unsupported = request(9999, 1)  # authentication comes first, even for a code nobody serves
    assert_refused(ask(secured, unsupported), "username cannot be null.")
    assert not secured.store.has_topic(TOPIC)  # nothing above got as far as a handler

    binary = signed(RequestCode.SEND_MESSAGE_V2, send_fields(), body, serialize_type=SerializeType.ROCKETMQ)
    for accepted in (good, binary):
        answer = ask(secured, accepted)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert max_offset_as_root(secured, TOPIC, 0) == 2

    assert any(r.getMessage().endswith("refused: check signature failed.") for r in debug_logs.records)
    assert_no_secret_logged(debug_logs, [good.ext_fields[SIGNATURE], binary.ext_fields[SIGNATURE]])


def test_a_refused_one_way_offset_update_is_not_answered_and_not_stored(secured: Door) -> None:
    """mallory may not read ``secret-topic``: her one-way commit is dropped unanswered; root's
    own commit of the same queue then shows the path stores when allowed."""
    for _ in range(6):
        sent = ask(
            secured, signed(RequestCode.SEND_MESSAGE_V2, send_fields("secret-topic"), b"m", "AKROOT001")
        )
        assert sent.code == ResponseCode.SUCCESS, sent.remark
    queue = {"consumerGroup": GROUP, "topic": "secret-topic", "queueId": "0"}

    def commit(access_key: str, opaque: int) -> RemotingCommand:
        update = signed(
            RequestCode.UPDATE_CONSUMER_OFFSET, {**queue, "commitOffset": "5"}, access_key=access_key
        )
        return RemotingCommand(**{**_fields(update), "opaque": opaque, "flag": FLAG_ONEWAY})

    def committed(client: RawClient, opaque: int) -> tuple[int, int, int | None]:
        query = signed(RequestCode.QUERY_CONSUMER_OFFSET, queue, access_key="AKROOT001")
        client.send(RemotingCommand(**{**_fields(query), "opaque": opaque}))
        answer = client.recv()
        offset = OffsetResponse.from_ext_fields(answer.ext_fields).offset if answer.ext_fields else None
        return answer.opaque, answer.code, offset

    with RawClient("127.0.0.1", secured.door.port) as client:
        client.send(commit("AKMALLORY1", 7))
        # 7 got no answer, and nothing was committed
        assert committed(client, 8) == (8, ResponseCode.QUERY_NOT_FOUND, None)
        client.send(commit("AKROOT001", 9))
        assert committed(client, 10) == (10, ResponseCode.SUCCESS, 5)


def test_a_transaction_is_ended_only_by_a_writer_of_its_topics(secured: Door) -> None:
    """END_TRANSACTION without a topic (RocketMQ 4 clients): the halves' topics decide."""
    half = send_fields("acl-tx") | {"e": "0", "f": "4", "i": "TRAN_MSG\x01true\x02PGROUP\x01acl-pg\x02"}
    sent = ask(secured, signed(RequestCode.SEND_MESSAGE_V2, half, b"tx", "AKALICE01"))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    txid = sent.ext_fields["transactionId"]
    end = {"producerGroup": "acl-pg", "tranStateTableOffset": "0", "commitLogOffset": "0",
           "commitOrRollback": "8", "msgId": txid, "transactionId": txid}  # fmt: skip
    assert_refused(ask(secured, signed(RequestCode.END_TRANSACTION, end, access_key="AKMALLORY1")),
                   no("mallory", "Topic:acl-tx", "write"))  # fmt: skip
    assert secured.store.max_offset("acl-tx", 0) == 0  # still a half
    assert ask(secured, signed(RequestCode.END_TRANSACTION, end)).code == ResponseCode.SUCCESS
    wait_until(lambda: secured.store.max_offset("acl-tx", 0) == 1, 10, "the committed message")


def test_viewing_a_message_by_offset_needs_read_on_its_topic(secured: Door) -> None:
    sent = ask(secured, signed(RequestCode.SEND_MESSAGE_V2, send_fields("secret-topic"), b"s", "AKROOT001"))
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    view = {"offset": "0"}  # the CommitLog offset of that first record; no topic, as ali-ons sends it
    assert_refused(ask(secured, signed(RequestCode.VIEW_MESSAGE_BY_ID, view, access_key="AKMALLORY1")),
                   no("mallory", "Topic:secret-topic", "read"))  # fmt: skip
    shown = ask(secured, signed(RequestCode.VIEW_MESSAGE_BY_ID, view, access_key="AKROOT001"))
    # the raw record: ... bodyLength 1, body "s", topicLength 12, the topic ...
    assert shown.code == ResponseCode.SUCCESS and b"\x00\x00\x00\x01s\x0csecret-topic" in shown.body


def test_every_served_code_has_a_row() -> None:
    """A handler added without a row would need authentication only: the table must grow too."""
    assert set(_HANDLERS) <= set(NEEDS)


def no(user: str, resource: str, operation: str) -> str:
    """The door's remark for a refused right."""
    return f"User:{user} has no permission to access {resource} from 127.0.0.1, {operation} is not allowed."


PULL = {"consumerGroup": GROUP, "topic": "other-topic", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
        "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0"}  # fmt: skip
CREATE = {"topic": "acl-new", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
          "perm": "6", "topicFilterType": "SINGLE_TAG"}  # fmt: skip


@pytest.mark.parametrize(
    ("code", "fields", "access_key", "remark"),
    [
        (RequestCode.PULL_MESSAGE, PULL, "AKALICE01", no("alice", "Topic:other-topic", "read")),
        (RequestCode.SEND_MESSAGE_V2, send_fields("%RETRY%acl-group"), "AKMALLORY1", None),
        (RequestCode.GET_BROKER_CLUSTER_INFO, {}, "AKALICE01",
         no("alice", "Cluster:kafka-cluster", "describe")),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, CREATE, "AKALICE01", no("alice", "Topic:acl-new", "create")),
        (RequestCode.GET_MAX_OFFSET, {"topic": "other-topic", "queueId": "0"}, "AKMALLORY1",
         no("mallory", "Topic:other-topic", "describe")),
    ],
)  # fmt: skip
def test_each_code_needs_its_right(
    secured: Door, code: int, fields: dict[str, str], access_key: str, remark: str | None
) -> None:
    answer = ask(
        secured, signed(code, fields, b"body" if code == RequestCode.SEND_MESSAGE_V2 else b"", access_key)
    )
    if remark is None:  # a send to a group's retry topic needs READ on the group: mallory has it
        assert answer.code == ResponseCode.SUCCESS, answer.remark
    else:
        assert_refused(answer, remark)


def _fields(cmd: RemotingCommand) -> dict[str, Any]:
    return {name: getattr(cmd, name) for name in RemotingCommand.__dataclass_fields__}


def test_a_route_lookup_creates_a_topic_only_for_a_writer(secured: Door) -> None:
    """Describing a missing topic does not create it (RocketMQ creates topics on a send): a
    reader's lookup answers TOPIC_NOT_EXIST, a writer's creates it (the gRPC and Kafka rule)."""
    lookup = GetRouteInfoRequest(topic="acl-new").to_ext_fields()
    refused = ask(secured, signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup, access_key="AKMALLORY1"))
    assert refused.code == ResponseCode.TOPIC_NOT_EXIST and not secured.store.has_topic("acl-new")
    created = ask(secured, signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup))
    assert created.code == ResponseCode.SUCCESS and secured.store.has_topic("acl-new")
    again = ask(secured, signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, lookup, access_key="AKMALLORY1"))
    assert again.code == ResponseCode.SUCCESS  # an existing topic: describe is enough


def test_check_backs_go_only_to_a_producer_that_may_write_the_topic(secured: Door) -> None:
    """A heartbeat may name any producer group, so naming one is no right to its check-backs
    (they carry the half message): mallory (read only) registered as a producer of the group
    gets none; alice (who may write the topic) does."""
    beat = encode_heartbeat(HeartbeatData("mallory@1", ("acl-pg",)))
    with RawClient("127.0.0.1", secured.door.port) as mallory:
        mallory.send(signed(RequestCode.HEART_BEAT, {}, beat, "AKMALLORY1"))
        assert mallory.recv().code == ResponseCode.SUCCESS
        assert secured.door.check_backs.producer_connection("acl-pg", TOPIC) is None
        with RawClient("127.0.0.1", secured.door.port) as alice:
            beat = encode_heartbeat(HeartbeatData("alice@1", ("acl-pg",)))
            alice.send(signed(RequestCode.HEART_BEAT, {}, beat))
            assert alice.recv().code == ResponseCode.SUCCESS
            chosen = secured.door.check_backs.producer_connection("acl-pg", TOPIC)
            assert chosen is not None and chosen.client_id == "alice@1"
