"""Typed headers (V1/V2 send names, validation) and the JSON / batch bodies, with golden bytes."""

from __future__ import annotations

import pytest

from ingest_api.remoting.batch import BatchEntry, decode_batch, encode_batch
from ingest_api.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    MessageQueueRef,
    QueueData,
    SubscriptionData,
    TopicRouteData,
    decode_cluster_info,
    decode_consumer_list,
    decode_heartbeat,
    decode_kv_table,
    decode_lock_request,
    decode_lock_response,
    decode_route,
    encode_cluster_info,
    encode_consumer_list,
    encode_heartbeat,
    encode_kv_table,
    encode_lock_request,
    encode_lock_response,
    encode_route,
)
from ingest_api.remoting.codec import request
from ingest_api.remoting.codes import RequestCode
from ingest_api.remoting.errors import BodyError, HeaderFieldError
from ingest_api.remoting.headers import (
    EndTransactionRequest,
    GetMaxOffsetRequest,
    PullMessageRequest,
    PullMessageResponse,
    SendMessageRequest,
    SendMessageResponse,
    decode_msg_id,
    decode_send_request,
    encode_msg_id,
    send_request_ext_fields,
)

# What ali-ons 3.12 puts in a SEND_MESSAGE_V2 header (mq_client_api.js sendMessage), after the
# JSON number/boolean values are read as Java strings.
ALI_ONS_V2 = {
    "a": "PG",
    "b": "T",
    "c": "TBW102",
    "d": "4",
    "e": "2",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01tagA\x02KEYS\x01k1 k2\x02",
    "j": "0",
    "k": "false",
}
SEND = SendMessageRequest(
    producer_group="PG",
    topic="T",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=2,
    sys_flag=0,
    born_timestamp=1_700_000_000_000,
    flag=0,
    properties="TAGS\x01tagA\x02KEYS\x01k1 k2\x02",
    reconsume_times=0,
    unit_mode=False,
)


def test_send_v2_letters_and_v1_names_decode_to_one_header() -> None:
    v2 = decode_send_request(request(RequestCode.SEND_MESSAGE_V2, 1, ALI_ONS_V2))
    assert v2 == SEND
    assert v2.property_map() == {"TAGS": "tagA", "KEYS": "k1 k2"}
    v1_fields = send_request_ext_fields(SEND, v2=False)
    assert v1_fields["producerGroup"] == "PG" and v1_fields["bornTimestamp"] == "1700000000000"
    assert decode_send_request(request(RequestCode.SEND_MESSAGE, 1, v1_fields)) == SEND
    assert send_request_ext_fields(SEND, v2=True) == ALI_ONS_V2
    batch = decode_send_request(request(RequestCode.SEND_BATCH_MESSAGE, 1, {**ALI_ONS_V2, "m": "true"}))
    assert batch.batch is True


def test_missing_and_bad_fields_name_the_field() -> None:
    incomplete = {k: v for k, v in ALI_ONS_V2.items() if k != "e"}
    with pytest.raises(HeaderFieldError, match=r"SendMessageRequest: the field <e> is missing"):
        decode_send_request(request(RequestCode.SEND_MESSAGE_V2, 1, incomplete))
    with pytest.raises(HeaderFieldError, match=r"the field <queueOffset> is not an integer: '12x'"):
        PullMessageRequest.from_ext_fields(
            {
                "consumerGroup": "G",
                "topic": "T",
                "queueId": "0",
                "queueOffset": "12x",
                "maxMsgNums": "32",
                "sysFlag": "2",
                "commitOffset": "0",
                "suspendTimeoutMillis": "15000",
                "subVersion": "1",
            }
        )
    with pytest.raises(HeaderFieldError, match="not a send request"):
        decode_send_request(request(RequestCode.PULL_MESSAGE, 1, ALI_ONS_V2))


def test_defaults_and_java_boolean_parsing() -> None:
    assert GetMaxOffsetRequest.from_ext_fields({"topic": "T", "queueId": "3"}).committed is True
    assert (
        GetMaxOffsetRequest.from_ext_fields({"topic": "T", "queueId": "3", "committed": "FALSE"}).committed
        is False
    )
    end = EndTransactionRequest.from_ext_fields(
        {
            "producerGroup": "PG",
            "tranStateTableOffset": "5",
            "commitLogOffset": "1024",
            "commitOrRollback": "8",
            "msgId": "ABC",
            "fromTransactionCheck": "True",
        }
    )
    assert (end.commit_or_rollback, end.from_transaction_check, end.transaction_id) == (8, True, None)


def test_response_headers_render_as_strings() -> None:
    msg_id = encode_msg_id(("127.0.0.1", 10911), 4096)
    assert msg_id == "7F00000100002A9F0000000000001000"
    assert decode_msg_id(msg_id) == (("127.0.0.1", 10911), 4096)
    send = SendMessageResponse(msg_id=msg_id, queue_id=1, queue_offset=7, transaction_id="U1")
    assert send.to_ext_fields() == {
        "msgId": msg_id,
        "queueId": "1",
        "queueOffset": "7",
        "transactionId": "U1",
    }
    pull = PullMessageResponse(suggest_which_broker_id=0, next_begin_offset=9, min_offset=0, max_offset=9)
    assert pull.to_ext_fields() == {
        "suggestWhichBrokerId": "0",
        "nextBeginOffset": "9",
        "minOffset": "0",
        "maxOffset": "9",
    }
    assert PullMessageResponse.from_ext_fields(pull.to_ext_fields()) == pull


ROUTE = TopicRouteData(
    queue_datas=[QueueData("broker-a", 4, 4, 6)],
    broker_datas=[BrokerData("DefaultCluster", "broker-a", {1: "127.0.0.2:10911", 0: "127.0.0.1:10911"})],
)
ROUTE_JSON = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911","1":"127.0.0.2:10911"},"brokerName":"broker-a",'
    b'"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":'
    b'[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)


def test_route_golden() -> None:
    assert encode_route(ROUTE) == ROUTE_JSON
    assert decode_route(ROUTE_JSON) == ROUTE


def test_route_decodes_fastjson_unquoted_broker_ids() -> None:
    """fastjson writes HashMap<Long, String> keys bare; ali-ons reads it with JSON2."""
    fastjson = ROUTE_JSON.replace(b'{"0":', b"{0:").replace(b',"1":', b",1:")
    assert b"{0:" in fastjson
    assert decode_route(fastjson) == ROUTE
    with pytest.raises(BodyError, match="TopicRouteData body is not JSON"):
        decode_route(b"{broken")


def test_cluster_info_round_trip() -> None:
    info = ClusterInfo({"broker-a": ROUTE.broker_datas[0]}, {"DefaultCluster": ["broker-a"]})
    raw = encode_cluster_info(info)
    assert raw.startswith(b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"127.0.0.1:10911"')
    assert raw.endswith(b'"clusterAddrTable":{"DefaultCluster":["broker-a"]}}')
    assert decode_cluster_info(raw) == info


# ali-ons 3.12's heartbeat body (mq_client.js _prepareHeartbeatData + JSON.stringify), one push
# consumer subscribed to "T" with "tagA || tagB" and one producer group.
ALI_ONS_HEARTBEAT = (
    b'{"clientID":"10.0.0.5@4242","consumerDataSet":[{"groupName":"G","consumeType":"CONSUME_PASSIVELY",'
    b'"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":'
    b'[{"topic":"T","subString":"tagA || tagB","classFilterMode":false,"tagsSet":["tagA","tagB"],'
    b'"codeSet":[3552231,3552232],"subVersion":1700000000000}],"unitMode":false}],'
    b'"producerDataSet":[{"groupName":"PG"}]}'
)
HEARTBEAT = HeartbeatData(
    client_id="10.0.0.5@4242",
    producer_groups=("PG",),
    consumers=(
        ConsumerData(
            group_name="G",
            subscriptions=(
                SubscriptionData(
                    topic="T",
                    sub_string="tagA || tagB",
                    tags_set=("tagA", "tagB"),
                    code_set=(3552231, 3552232),
                    sub_version=1_700_000_000_000,
                ),
            ),
        ),
    ),
)


def test_heartbeat_golden() -> None:
    assert decode_heartbeat(ALI_ONS_HEARTBEAT) == HEARTBEAT
    encoded = encode_heartbeat(HEARTBEAT)
    assert encoded == (
        b'{"clientID":"10.0.0.5@4242","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","groupName":"G","messageModel":"CLUSTERING",'
        b'"subscriptionDataSet":[{"classFilterMode":false,"codeSet":[3552231,3552232],"expressionType":"TAG",'
        b'"subString":"tagA || tagB","subVersion":1700000000000,"tagsSet":["tagA","tagB"],"topic":"T"}],'
        b'"unitMode":false}],"producerDataSet":[{"groupName":"PG"}]}'
    )
    assert decode_heartbeat(encoded) == HEARTBEAT


def test_heartbeat_errors_name_the_field() -> None:
    with pytest.raises(BodyError, match=r"HeartbeatData.clientID must be a string"):
        decode_heartbeat(b'{"producerDataSet":[]}')
    with pytest.raises(BodyError, match=r"consumerData.groupName must be a string"):
        decode_heartbeat(b'{"clientID":"c","consumerDataSet":[{}]}')


def test_consumer_list_lock_and_kv_bodies() -> None:
    assert encode_consumer_list(["a@1", "b@2"]) == b'{"consumerIdList":["a@1","b@2"]}'
    assert decode_consumer_list(b'{"consumerIdList":["a@1","b@2"]}') == ["a@1", "b@2"]
    mqs = (MessageQueueRef("T", "broker-a", 1), MessageQueueRef("T", "broker-a", 0))
    lock = LockBatchRequest("G", "c@1", mqs)
    assert encode_lock_request(lock) == (
        b'{"clientId":"c@1","consumerGroup":"G","mqSet":[{"brokerName":"broker-a","queueId":1,"topic":"T"},'
        b'{"brokerName":"broker-a","queueId":0,"topic":"T"}],"onlyThisBroker":false}'
    )
    assert decode_lock_request(encode_lock_request(lock)) == lock
    locked = encode_lock_response(mqs)
    assert locked == (
        b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"},'
        b'{"brokerName":"broker-a","queueId":1,"topic":"T"}]}'
    )
    assert decode_lock_response(locked) == sorted(mqs)
    assert decode_kv_table(encode_kv_table({"k": "v"})) == {"k": "v"}


# One MessageBatch entry (MessageDecoder.encodeMessage): flag 3, body "ab", properties KEYS=k.
BATCH_ENTRY = bytes.fromhex(
    "0000001f"  # TOTALSIZE 31 = 20 + 2 + 2 + 7
    "00000000"  # MAGICCODE (unused)
    "00000000"  # BODYCRC (unused)
    "00000003"  # FLAG
    "00000002" "6162"  # BODYLEN, "ab"
    "0007" "4b455953016b02"  # PROPLEN 7, "KEYS\x01k\x02"
)  # fmt: skip


def test_batch_golden() -> None:
    entry = BatchEntry(3, b"ab", {"KEYS": "k"})
    assert encode_batch([entry]) == BATCH_ENTRY
    assert decode_batch(BATCH_ENTRY * 2) == [entry, entry]
    with pytest.raises(BodyError, match="entry 1 at byte 31 is truncated"):
        decode_batch(BATCH_ENTRY + BATCH_ENTRY[:10])
    with pytest.raises(BodyError, match="declares 32 bytes"):
        decode_batch(b"\x00\x00\x00\x20" + BATCH_ENTRY[4:])
