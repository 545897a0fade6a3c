"""Deliveries built by byte edits (store.write.relocate_batch): golden bytes of a delivered level
and timer record, and the same bytes as the record-by-record rebuild for any parked record."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import NotRelocatable, RelocationKind
from store.format.batch_encode import patch_be
from store.format.record import (
    PHYSICAL_OFFSET_POS,
    QUEUE_OFFSET_POS,
    STORE_TIMESTAMP_POS,
    RecordFields,
    encode_record,
)
from store.format.record_check import check_record
from store.write.relocate import relocated_bytes
from store.write.relocate_batch import ParkedRecords, relocated_records

LEVELS = (1000, 5000, 10_000)


def parked_level(
    real_topic: str = "orders",
    qid: str = "1",
    *,
    level: int = 3,
    body: bytes = b"hi",
    props: dict[str, str] | None = None,
) -> bytes:
    properties = {
        "DELAY": str(level),
        "UNIQ_KEY": "0A0B",
        "TAGS": "paid",
        "REAL_TOPIC": real_topic,
        "REAL_QID": qid,
    }
    properties.update(props or {})
    return encode_record(
        RecordFields(
            topic="SCHEDULE_TOPIC_XXXX", body=body, queue_id=level - 1, flag=7, properties=properties,
            sys_flag=0, born_timestamp_ms=1_000, born_host=("10.0.0.1", 5), store_timestamp_ms=2_000,
            store_host=("10.0.0.2", 7), reconsume_times=2, queue_offset=11, physical_offset=12,
        )
    )  # fmt: skip


def parked_timer(
    real_topic: str = "orders", qid: str = "0", *, out_ms: int = 9_000, props: dict[str, str] | None = None
) -> bytes:
    properties = {"TIMER_DELIVER_MS": str(out_ms + 1), "UNIQ_KEY": "0C0D", "TIMER_OUT_MS": str(out_ms),
                  "REAL_TOPIC": real_topic, "REAL_QID": qid}  # fmt: skip
    properties.update(props or {})
    return encode_record(
        RecordFields(
            topic="rmq_sys_wheel_timer", body=b"later", properties=properties, born_timestamp_ms=1_000,
            born_host=("10.0.0.1", 5), store_timestamp_ms=3_000, store_host=("10.0.0.2", 7), queue_offset=4,
            physical_offset=99,
        )
    )  # fmt: skip


def batch(
    raws: list[bytes], kinds: list[int] | None = None, enqueue: int = 3_000, dequeue: int = 10_000
) -> ParkedRecords:
    sizes = np.array([len(r) for r in raws], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    n = len(raws)
    return ParkedRecords(
        np.frombuffer(b"".join(raws), dtype=np.uint8),
        starts,
        sizes,
        np.arange(100, 100 + n, dtype=np.int64),
        np.asarray(kinds or [0] * n, dtype=np.int8),
        np.full(n, enqueue, dtype=np.int64),
        np.full(n, dequeue, dtype=np.int64),
    )


def delivered(raws: list[bytes], kinds: list[int] | None = None) -> list[bytes]:
    out = relocated_records(batch(raws, kinds), level_delays_ms=LEVELS, timer_precision_ms=1000).records
    return [out.batch.record(i) for i in range(len(out))]


#: SCHEDULE_TOPIC_XXXX queue 2 -> orders queue 1: every header field kept but TOTALSIZE, QUEUEID
#: (REAL_QID) and PREPARED_TX_OFFSET (0); the topic; the properties string copied whole.
GOLDEN_LEVEL_HEX = (
    "000000a0" "daa320a7" "58932aac"  # TOTALSIZE 160, MAGIC V1, BODYCRC of "hi" (kept)
    "00000001" "00000007"  # QUEUEID = REAL_QID 1, FLAG
    "000000000000000b" "000000000000000c"  # QUEUEOFFSET, PHYSICALOFFSET: the parked ones (patched at append)
    "00000000" "00000000000003e8" "0a00000100000005"  # SYSFLAG, BORNTIMESTAMP 1000, BORNHOST 10.0.0.1:5
    "00000000000007d0" "0a00000200000007"  # STORETIMESTAMP (patched at append), STOREHOST 10.0.0.2:7
    "00000002" "0000000000000000" "00000002" "6869"  # RECONSUMETIMES, PREPARED_TX_OFFSET 0, BODYLEN, "hi"
    "06" "6f7264657273"  # TOPICLEN, "orders"
    "003d"  # PROPLEN 61: DELAY=3 UNIQ_KEY=0A0B TAGS=paid REAL_TOPIC=orders REAL_QID=1 (DELAY/REAL_* stay)
    "44454c4159013302" "554e49515f4b45590130413042" "02" "544147530170616964" "02"
    "5245414c5f544f504943016f726465727302" "5245414c5f51494401" "3102"
)  # fmt: skip

#: rmq_sys_wheel_timer queue 0 -> orders queue 0: as a level message, plus TIMER_ENQUEUE_MS and
#: TIMER_DEQUEUE_MS appended to the parked properties string.
GOLDEN_TIMER_HEX = (
    "000000e6" "daa320a7" "6c03b249"  # TOTALSIZE 230, MAGIC V1, BODYCRC of "later" (kept)
    "00000000" "00000000"  # QUEUEID = REAL_QID 0, FLAG
    "0000000000000004" "0000000000000063"  # QUEUEOFFSET, PHYSICALOFFSET (patched at append)
    "00000000" "00000000000003e8" "0a00000100000005"  # SYSFLAG, BORNTIMESTAMP, BORNHOST
    "0000000000000bb8" "0a00000200000007"  # STORETIMESTAMP (patched at append), STOREHOST
    "00000000" "0000000000000000" "00000005" "6c61746572"  # RECONSUME, PREPARED_TX 0, BODYLEN, "later"
    "06" "6f7264657273"  # TOPICLEN, "orders"
    "0080"  # PROPLEN 128: the parked string ...
    "54494d45525f44454c495645525f4d53013930303102" "554e49515f4b4559013043304402"
    "54494d45525f4f55545f4d53013930303002" "5245414c5f544f504943016f726465727302"
    "5245414c5f5149440130" "02"
    "54494d45525f454e51554555455f4d53013330303002"  # ... + TIMER_ENQUEUE_MS=3000
    "54494d45525f444551554555455f4d5301313030303002"  # ... + TIMER_DEQUEUE_MS=10000
)  # fmt: skip


def test_golden_delivered_level_record() -> None:
    (out,) = delivered([parked_level()])
    assert out.hex() == GOLDEN_LEVEL_HEX
    check = check_record(out, 0, check_crc=True)
    assert check.topic == "orders" and check.header is not None and check.header.queue_id == 1
    assert check.properties == {"DELAY": "3", "UNIQ_KEY": "0A0B", "TAGS": "paid", "REAL_TOPIC": "orders",
                                "REAL_QID": "1"}  # fmt: skip


def test_golden_delivered_timer_record() -> None:
    (out,) = delivered([parked_timer()])
    assert out.hex() == GOLDEN_TIMER_HEX
    check = check_record(out, 0, check_crc=True)
    assert check.properties is not None
    assert check.properties["TIMER_ENQUEUE_MS"] == "3000" and check.properties["TIMER_DEQUEUE_MS"] == "10000"


def _zeroed(record: bytes) -> bytes:
    """The fields the append patches zeroed (the two paths leave different placeholders)."""
    buf = np.frombuffer(bytearray(record), dtype=np.uint8)
    for position in (QUEUE_OFFSET_POS, PHYSICAL_OFFSET_POS, STORE_TIMESTAMP_POS):
        patch_be(buf, np.array([position]), 0, 8)
    return buf.tobytes()


def _scalar(raw: bytes, kind: int = 0) -> bytes | None:
    rebuilt = relocated_bytes(raw, RelocationKind(kind), enqueue_ms=3_000, dequeue_ms=10_000, max_level=3)
    return None if rebuilt is None else _zeroed(rebuilt.data)


_text = st.text(
    st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]), min_size=1, max_size=12
)
_topic = st.from_regex(r"[A-Za-z0-9_%-]{1,20}", fullmatch=True) | st.just("t" * 140)


@st.composite
def _parked(draw: st.DrawFn) -> bytes:
    user = draw(st.dictionaries(_text.map(lambda k: "u-" + k), _text, max_size=3))
    topic, qid = draw(_topic), str(draw(st.integers(0, 7)))
    body = draw(st.binary(max_size=40))
    if draw(st.booleans()):
        return parked_level(topic, qid, level=draw(st.integers(1, 3)), body=body, props=user)
    if draw(st.integers(0, 5)) == 0:  # stamped already: rebuilt record by record
        user["TIMER_ENQUEUE_MS"] = "1"
    return parked_timer(topic, qid, out_ms=draw(st.integers(0, 10**13)), props=user)


@settings(max_examples=150, deadline=None)
@given(st.lists(_parked(), min_size=1, max_size=12))
def test_byte_edits_give_the_record_by_record_rebuild(raws: list[bytes]) -> None:
    got = [_zeroed(r) for r in delivered(raws)]
    assert got == [_scalar(r) for r in raws]


def test_rolls_keep_their_place_among_deliveries() -> None:
    raws = [parked_timer(out_ms=1), parked_timer(out_ms=2), parked_level(), parked_timer(out_ms=3)]
    kinds = [0, RelocationKind.ROLL, 0, 0]
    got = [_zeroed(r) for r in delivered(raws, kinds)]
    assert got == [_scalar(r, k) for r, k in zip(raws, kinds, strict=True)]
    assert check_record(got[1], 0, check_crc=True).topic == "rmq_sys_wheel_timer"


def test_a_delayed_half_message_is_dropped_and_due_times_are_reported() -> None:
    raws = [parked_level(), parked_level("RMQ_SYS_TRANS_HALF_TOPIC"), parked_timer(out_ms=7_000)]
    built = relocated_records(batch(raws), level_delays_ms=LEVELS, timer_precision_ms=1000)
    assert built.rows.tolist() == [0, 2]
    # level 3: store time + 10 s; timer: TIMER_OUT_MS + the precision
    assert built.due_ms.tolist() == [2_000 + 10_000, 8_000]
    assert built.records.topics == ("orders", "orders")
    assert built.records.batch.uniq_keys == ["0A0B", "0C0D"] and built.records.tags == ("paid", None)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (encode_record(RecordFields(topic="orders", body=b"x")), "is not a parked message"),
        (parked_level(qid="x"), "has no REAL_TOPIC/REAL_QID"),
        (b"\x00" * 120, "no valid record"),
    ],
)
def test_what_is_not_a_parked_record_is_refused(raw: bytes, message: str) -> None:
    with pytest.raises(NotRelocatable, match=message):
        delivered([parked_level(), raw])
