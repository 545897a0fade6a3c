"""The door's paths through the broker core on raw sockets, over a running broker: a send-back
into the retry ladder (CONSUMER_SEND_MSG_BACK), transactional halves ended by END_TRANSACTION,
a check-back sent to the producer's own connection, and a POP group's offsets refused."""

from __future__ import annotations

import asyncio

from broker.pop import GroupKind
from ingest_api.remoting.bodies import HeartbeatData, decode_route, encode_heartbeat
from ingest_api.remoting.codec import request
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.headers import SendMessageRequest, encode_msg_id, send_request_ext_fields
from store import SENDBACK_TOPIC, TxOutcome
from tests.remoting.conftest import Door
from tests.remoting.rawclient import RawClient
from tests.remoting.test_handlers import call
from tests.support.waiting import wait_until


def _send(client: RawClient, opaque: int, topic: str, properties: str, sys_flag: int = 0) -> dict[str, str]:
    header = SendMessageRequest(
        producer_group="TPG",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=properties,
    )
    client.send(request(RequestCode.SEND_MESSAGE_V2, opaque, send_request_ext_fields(header, v2=True), b"tx"))
    answer = client.recv()
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return dict(answer.ext_fields)


def test_send_back_goes_into_the_ladder_and_the_retry_topic_has_a_route(door: Door) -> None:
    with RawClient("127.0.0.1", door.door.port) as client:
        sent = _send(client, 1, "SbT", "TAGS\x01t\x02")
    offset = _offset(door, sent["msgId"])
    back = {
        "offset": str(offset),
        "group": "GB",
        "delayLevel": "0",
        "originTopic": "SbT",
        "originMsgId": sent["transactionId"],
        "maxReconsumeTimes": "3",
    }
    answer = call(door, request(RequestCode.CONSUMER_SEND_MSG_BACK, 2, back))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert door.store.max_offset(SENDBACK_TOPIC, 0) == 1  # the request the retry resolver applies
    route = call(door, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 3, {"topic": "%RETRY%GB"}))
    assert (
        route.code == ResponseCode.SUCCESS and decode_route(route.body).queue_datas[0].write_queue_nums == 1
    )
    nowhere = call(door, request(RequestCode.CONSUMER_SEND_MSG_BACK, 4, {**back, "offset": str(offset + 1)}))
    assert nowhere.code == ResponseCode.SYSTEM_ERROR and "look message by offset failed" in (
        nowhere.remark or ""
    )
    assert door.store.max_offset(SENDBACK_TOPIC, 0) == 1


def _offset(door: Door, msg_id: str) -> int:
    view = door.store.get_by_msg_id(msg_id)
    assert view is not None
    return view.commitlog_offset


def _transaction(door: Door, txid: str) -> TxOutcome | None:
    assert door.broker.operators is not None and door.broker.operators.transactions is not None
    tx = door.broker.operators.transactions.service.get(txid)
    assert tx is not None
    return tx.outcome


def test_a_half_is_committed_by_end_transaction(door: Door) -> None:
    door.store.create_topic("TxT", 1)
    with RawClient("127.0.0.1", door.door.port) as client:
        sent = _send(client, 1, "TxT", "TRAN_MSG\x01true\x02PGROUP\x01TPG\x02", sys_flag=0x4)
        assert door.store.max_offset("TxT", 0) == 0  # a half is not visible
        end = {
            "producerGroup": "TPG",
            "tranStateTableOffset": "0",
            "commitLogOffset": "0",
            "commitOrRollback": "8",
            "msgId": sent["transactionId"],
            "transactionId": sent["transactionId"],
        }
        client.send(request(RequestCode.END_TRANSACTION, 2, end, oneway=True))
        wait_until(lambda: door.store.max_offset("TxT", 0) == 1, 10, "the committed message")
    (view,) = door.store.get_messages("TxT", 0, 0, 1).messages
    assert view.uniq_key == sent["transactionId"] and view.body == b"tx"
    assert _transaction(door, sent["transactionId"]) is TxOutcome.COMMIT


def test_a_check_back_reaches_the_producer_connection_and_its_answer_ends_the_transaction(door: Door) -> None:
    door.store.create_topic("CkT", 1)
    with RawClient("127.0.0.1", door.door.port) as client:
        client.send(
            request(RequestCode.HEART_BEAT, 1, body=encode_heartbeat(HeartbeatData("c1@p", ("TPG",))))
        )
        assert client.recv().code == ResponseCode.SUCCESS
        sent = _send(client, 2, "CkT", "TRAN_MSG\x01true\x02", sys_flag=0x4)
        txid = sent["transactionId"]
        offset = _offset(door, sent["msgId"])
        config = door.store.config
        check = {
            "transaction_id": txid,
            "producer_group": "TPG",
            "topic": "CkT",
            "msg_id": encode_msg_id((config.store_host, config.store_port), offset),
            "uniq_key": txid,
            "check_times": 1,
        }
        dispatcher = door.broker.operators.transactions.dispatcher  # type: ignore[union-attr]

        async def submit() -> None:
            dispatcher.submit(check)

        asyncio.run_coroutine_threadsafe(submit(), door.loop).result(10)
        asked = client.recv()
        assert (asked.code, asked.is_oneway) == (RequestCode.CHECK_TRANSACTION_STATE, True)
        assert asked.ext_fields["transactionId"] == txid and asked.ext_fields["commitLogOffset"] == str(
            offset
        )
        assert asked.body == door.store.read_record(offset)
        assert dispatcher.stats.outcomes["pushed"] == 1
        answer = {
            "producerGroup": "TPG",
            "tranStateTableOffset": "0",
            "commitLogOffset": str(offset),
            "commitOrRollback": "12",
            "msgId": txid,
            "transactionId": txid,
            "fromTransactionCheck": "true",
        }
        client.send(request(RequestCode.END_TRANSACTION, 3, answer, oneway=True))
        wait_until(lambda: _transaction(door, txid) is TxOutcome.ROLLBACK, 10, "the rollback")
    assert door.store.max_offset("CkT", 0) == 0


def test_a_pop_groups_offsets_are_refused(door: Door) -> None:
    door.store.create_topic("PopT", 1)
    door.broker.pop.configure_group("POPG")
    assert door.broker.pop.group_kind("POPG") is GroupKind.POP
    update = {"consumerGroup": "POPG", "topic": "PopT", "queueId": "0", "commitOffset": "0"}
    answer = call(door, request(RequestCode.UPDATE_CONSUMER_OFFSET, 1, update))
    assert answer.code == ResponseCode.NO_PERMISSION and "GroupKindConflict" in (answer.remark or "")
    assert door.store.committed_offset("POPG", "PopT", 0) == -1
