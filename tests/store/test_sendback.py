"""Send-back records byte for byte: the request (sparkmq's rmq_sys_sendback), and the retry and
dead-letter records RocketMQ's ``consumerSendMsgBack`` writes; plus the resolver's attempt rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from store import Message, MessageStore, StoreConfig, java_string_hash
from store.format.record import encode_record
from store.format.record_check import check_record
from store.write.sendback import origin_id, sendback_record, sendback_request, sendback_requests
from streaming.operators.retry import accepted

NOW = 1_700_000_000_000
HOST = ("127.0.0.1", 10911)

#: The message sent back: work/1, tags t, property p=1, reconsume times 2 (a third delivery).
GOLDEN_SOURCE_HEX = (
    "0000009adaa320a7556ba434000000010000000000000000000000000000000000000000000000000000018bcfe56800"
    "0a000001000013880000018bcfe568007f00000100002a9f000000020000000000000000000000066368617267650477"
    "6f726b003570013102554e49515f4b455901554e49513030303030303030303030303030303030303030303030303030"
    "30310254414753017402"
)
#: The request: rmq_sys_sendback/0, body = the whole source record, SENDBACK_* properties
#: (group billing, origin = the source's offsetMsgId, attempt 2, level 0 = the ladder, max 16,
#: 1 retry queue) and its own UNIQ_KEY.
GOLDEN_REQUEST_HEX = (
    "000001d3daa320a735631221000000000000000000000000000000000000000000000000000000000000018bcfe56800"
    "7f00000100002a9f00000000000000007f00000100002a9f0000000000000000000000000000009a0000009adaa320a7"
    "556ba434000000010000000000000000000000000000000000000000000000000000018bcfe568000a00000100001388"
    "0000018bcfe568007f00000100002a9f0000000200000000000000000000000663686172676504776f726b0035700131"
    "02554e49515f4b455901554e495130303030303030303030303030303030303030303030303030303031025441475301"
    "740210726d715f7379735f73656e646261636b00ce53454e444241434b5f47524f55500162696c6c696e670253454e44"
    "4241434b5f4f524947494e0137463030303030313030303032413946303030303030303030303030303030300253454e"
    "444241434b5f415454454d505401320253454e444241434b5f44454c41595f4c4556454c01300253454e444241434b5f"
    "4d41585f5245434f4e53554d450131360253454e444241434b5f52455452595f515545554553013102554e49515f4b45"
    "5901524551303030303030303030303030303030303030303030303030303030303102"
)
#: The retry: the source's fields, reconsume times 3, parked in SCHEDULE_TOPIC_XXXX queue 4
#: (level 3 + 2), RETRY_TOPIC=work, ORIGIN_MESSAGE_ID, DELAY=5, REAL_TOPIC=%RETRY%billing,
#: REAL_QID=0, UNIQ_KEY kept.
GOLDEN_RETRY_HEX = (
    "0000011adaa320a7556ba434000000040000000000000000000000000000000000000000000000000000018bcfe56800"
    "0a0000010000138800000000000000007f00000100002a9f000000030000000000000000000000066368617267651353"
    "43484544554c455f544f5049435f5858585800a670013102554e49515f4b455901554e49513030303030303030303030"
    "3030303030303030303030303030303031025441475301740252455452595f544f50494301776f726b024f524947494e"
    "5f4d4553534147455f49440137463030303030313030303032413946303030303030303030303030303030300244454c"
    "41590135025245414c5f544f504943012552455452592562696c6c696e67025245414c5f514944013002"
)
#: The dead letter (delay_level -1): %DLQ%billing/0, reconsume times 3, DELAY=0.
GOLDEN_DLQ_HEX = (
    "000000eedaa320a7556ba434000000000000000000000000000000000000000000000000000000000000018bcfe56800"
    "0a0000010000138800000000000000007f00000100002a9f000000030000000000000000000000066368617267650c25"
    "444c512562696c6c696e67008170013102554e49515f4b455901554e4951303030303030303030303030303030303030"
    "30303030303030303031025441475301740252455452595f544f50494301776f726b024f524947494e5f4d4553534147"
    "455f49440137463030303030313030303032413946303030303030303030303030303030300244454c4159013002"
)


def source_record(tmp_path: Path) -> bytes:
    config = StoreConfig(
        store_dir=tmp_path / "s", commitlog_file_size_bytes=1 << 22, background_services=False
    )
    with MessageStore.open(config, clock_ms=lambda: NOW) as ms:
        ms.create_topic("work", 2)
        put = ms.put_message(
            Message(
                topic="work", body=b"charge", tags="t", queue_id=1, properties={"p": "1"},
                uniq_key="UNIQ0000000000000000000000000001", born_host=("10.0.0.1", 5000), reconsume_times=2,
            )
        )  # fmt: skip
        raw = ms.read_record(put.commitlog_offset)
    assert raw is not None
    return raw


def request(raw: bytes, level: int, key: str) -> bytes:
    return encode_record(
        sendback_request(
            raw, group="billing", delay_level=level, max_reconsume_times=16, retry_queues=1,
            uniq_key=key, born_ms=NOW, store_host=HOST,
        )
    )  # fmt: skip


def test_golden_send_back_records(tmp_path: Path) -> None:
    raw = source_record(tmp_path)
    assert raw.hex() == GOLDEN_SOURCE_HEX
    ladder = request(raw, 0, "REQ00000000000000000000000000001")
    assert ladder.hex() == GOLDEN_REQUEST_HEX
    assert encode_record(sendback_record(ladder)).hex() == GOLDEN_RETRY_HEX
    dead = request(raw, -1, "REQ00000000000000000000000000002")
    assert encode_record(sendback_record(dead)).hex() == GOLDEN_DLQ_HEX


def test_ladder_levels_clamp_and_the_max_sends_to_the_dlq(tmp_path: Path) -> None:
    raw = source_record(tmp_path)  # reconsume times 2
    assert sendback_record(request(raw, 0, "R1"), max_level=4).queue_id == 3  # 3 + 2 clamps to 4
    assert sendback_record(request(raw, 7, "R2")).queue_id == 6  # an explicit level
    at_max = sendback_request(
        raw,
        group="g",
        delay_level=0,
        max_reconsume_times=2,
        retry_queues=1,
        uniq_key="R3",
        born_ms=NOW,
        store_host=HOST,
    )
    assert sendback_record(encode_record(at_max)).topic == "%DLQ%g"


def test_origin_and_retry_topic_are_set_once(tmp_path: Path) -> None:
    raw = source_record(tmp_path)
    first = sendback_record(request(raw, 0, "R1"))
    again = encode_record(first._replace(topic="%RETRY%billing", queue_id=0, physical_offset=4096))
    check = check_record(again, 0, check_crc=True)
    assert check.properties is not None
    assert origin_id(again) == first.properties["ORIGIN_MESSAGE_ID"]  # type: ignore[index]
    second = sendback_record(request(again, 0, "R2"))
    assert second.properties["RETRY_TOPIC"] == "work"  # type: ignore[index]
    assert second.properties["ORIGIN_MESSAGE_ID"] == first.properties["ORIGIN_MESSAGE_ID"]  # type: ignore[index]
    assert second.reconsume_times == 4 and second.queue_id == 5  # level 3 + 3


def test_one_retry_per_attempt() -> None:
    assert accepted([0, 0, 0], None) == [True, False, False]
    assert accepted([1, 1, 2, 1], 0) == [True, False, True, False]
    assert accepted([3], 3) == [False]


def test_cluster_request_names_this_brokers_own_retry_and_dlq_queues(tmp_path: Path) -> None:
    raw = source_record(tmp_path)
    placed = encode_record(
        sendback_request(
            raw, group="billing", delay_level=0, max_reconsume_times=16, retry_queues=2,
            uniq_key="REQ00000000000000000000000000003", born_ms=NOW, store_host=HOST,
            retry_queue_base=4, dlq_queue_id=3,
        )
    )  # fmt: skip
    # the two properties sit before UNIQ_KEY, RocketMQ's name\x01value\x02 encoding
    assert b"SENDBACK_RETRY_BASE\x014\x02SENDBACK_DLQ_QUEUE\x013\x02UNIQ_KEY\x01" in placed
    retry = sendback_record(placed)
    origin = retry.properties["ORIGIN_MESSAGE_ID"]  # type: ignore[index]
    assert retry.properties["REAL_QID"] == str(4 + abs(java_string_hash(origin)) % 2)  # type: ignore[index]
    dead = encode_record(
        sendback_request(
            raw, group="billing", delay_level=-1, max_reconsume_times=16, retry_queues=2,
            uniq_key="REQ00000000000000000000000000004", born_ms=NOW, store_host=HOST,
            retry_queue_base=4, dlq_queue_id=3,
        )
    )  # fmt: skip
    assert sendback_record(dead).topic == "%DLQ%billing" and sendback_record(dead).queue_id == 3


def test_a_batch_of_requests_is_the_golden_request_byte_for_byte(tmp_path: Path) -> None:
    """sendback_requests (column by column, many at once) writes what sendback_request writes."""
    raw = source_record(tmp_path)
    # a retry sent back again: ORIGIN_MESSAGE_ID is kept, not the retry's own msg id
    retry = sendback_record(bytes.fromhex(GOLDEN_REQUEST_HEX))
    again = encode_record(retry._replace(topic="%RETRY%billing", physical_offset=4096))
    sources = [raw, again, raw]
    levels, keys = [0, 3, -1], ["REQ00000000000000000000000000001", "R2", "R3"]
    buffer = np.frombuffer(b"".join(sources), dtype=np.uint8)
    starts = np.cumsum([0, *(len(s) for s in sources[:-1])]).astype(np.int64)
    batch = sendback_requests(
        buffer, starts, group="billing", delay_levels=levels, max_reconsume_times=[16, 16, 16],
        retry_queues=1, uniq_keys=keys, born_ms=NOW, store_host=HOST,
    )  # fmt: skip
    got = [batch.records.record(i) for i in range(3)]
    assert got[0].hex() == GOLDEN_REQUEST_HEX
    for i in (1, 2):
        expected = sendback_request(
            sources[i], group="billing", delay_level=levels[i], max_reconsume_times=16, retry_queues=1,
            uniq_key=keys[i], born_ms=NOW, store_host=HOST,
        )  # fmt: skip
        assert got[i] == encode_record(expected)
    assert batch.attempts.tolist() == [2, 3, 2] and batch.topics == ["work", "%RETRY%billing", "work"]
    assert batch.msg_ids[0] == "7F00000100002A9F0000000000000000"
    assert batch.uniq_keys == ["UNIQ0000000000000000000000000001"] * 3


def test_a_batch_with_cluster_queue_ids_is_the_record_by_record_request(tmp_path: Path) -> None:
    """In a cluster the columnar requests carry this broker's retry base and DLQ queue, as the
    record-by-record ones do (so a batch takes the columnar path whatever its queue ids)."""
    raw = source_record(tmp_path)
    buffer = np.frombuffer(raw * 2, dtype=np.uint8)
    starts = np.array([0, len(raw)], dtype=np.int64)
    batch = sendback_requests(
        buffer, starts, group="billing", delay_levels=[0, -1], max_reconsume_times=[16, 16],
        retry_queues=2, uniq_keys=["K1", "K2"], born_ms=NOW, store_host=HOST,
        retry_queue_base=4, dlq_queue_id=3,
    )  # fmt: skip
    for i, level in enumerate([0, -1]):
        expected = sendback_request(
            raw, group="billing", delay_level=level, max_reconsume_times=16, retry_queues=2,
            uniq_key=f"K{i + 1}", born_ms=NOW, store_host=HOST, retry_queue_base=4, dlq_queue_id=3,
        )  # fmt: skip
        assert batch.records.record(i) == encode_record(expected)
