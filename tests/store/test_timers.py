"""Timer messages at admission, as RocketMQ 5's ``HookUtils.transformTimerMessage``: precedence,
rounding, due-already messages, refusals, delay level precedence, and the parked record's bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import Message, MessageStore, StoreConfig, TimerIllegal
from store.format.record import RECORD_HEADER
from store.format.record_check import check_record
from store.names import SCHEDULE_TOPIC, TIMER_TOPIC
from store.write.timers import TimerRules, admit_timer, requested_deliver_ms, timer_out_ms

NOW = 1_700_000_000_123  # a fixed clock, ms


def open_store(tmp_path: Path, **changes: object) -> MessageStore:
    config = StoreConfig(
        store_dir=tmp_path / "store",
        commitlog_file_size_bytes=1 << 22,
        background_services=False,
        **changes,  # type: ignore[arg-type]
    )
    return MessageStore.open(config.validate(), clock_ms=lambda: NOW)


def test_precedence_is_sec_then_ms_then_deliver() -> None:
    every = {"TIMER_DELAY_SEC": "7", "TIMER_DELAY_MS": "500", "TIMER_DELIVER_MS": str(NOW + 9)}
    assert requested_deliver_ms(every, NOW) == (NOW + 7000, "TIMER_DELAY_SEC")
    del every["TIMER_DELAY_SEC"]
    assert requested_deliver_ms(every, NOW) == (NOW + 500, "TIMER_DELAY_MS")
    del every["TIMER_DELAY_MS"]
    assert requested_deliver_ms(every, NOW) == (NOW + 9, "TIMER_DELIVER_MS")


def test_rounding_down_to_the_slot_and_an_exact_multiple_one_lower() -> None:
    assert timer_out_ms(1_700_000_001_500, 1000) == 1_700_000_001_000
    assert timer_out_ms(1_700_000_002_000, 1000) == 1_700_000_001_000  # RocketMQ: deliverMs -= precision
    # The resolver delivers at TIMER_OUT_MS + precision: the requested time rounded up.
    assert timer_out_ms(1_700_000_001_001, 1000) + 1000 == 1_700_000_002_000


@given(deliver=st.integers(NOW + 1, NOW + 10**9), precision=st.sampled_from([1, 10, 1000, 5000]))
def test_delivery_slot_is_never_early_and_less_than_one_precision_late(deliver: int, precision: int) -> None:
    due = timer_out_ms(deliver, precision) + precision
    assert deliver <= due < deliver + precision


@pytest.mark.parametrize("raw", ["", "1.5", "1e3", " 5", "0x10", "9" * 30, "五"])
def test_a_value_that_is_not_a_java_long_is_illegal(raw: str) -> None:
    with pytest.raises(TimerIllegal) as info:
        admit_timer({"TIMER_DELIVER_MS": raw}, NOW, TimerRules())
    assert info.value.property == "TIMER_DELIVER_MS"


def test_beyond_the_max_delay_is_illegal_and_any_max_works() -> None:
    three_days = TimerRules()
    assert admit_timer({"TIMER_DELAY_MS": str(3 * 86_400_000)}, NOW, three_days) is not None
    with pytest.raises(TimerIllegal, match="max delay 259200000ms"):
        admit_timer({"TIMER_DELAY_MS": str(3 * 86_400_000 + 1)}, NOW, three_days)
    ten_years = TimerRules(max_delay_ms=3650 * 86_400_000)
    assert admit_timer({"TIMER_DELAY_SEC": str(3000 * 86_400)}, NOW, ten_years) is not None


def test_a_time_not_in_the_future_is_a_normal_message(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        ms.create_topic("orders", 2)
        for when in (NOW - 60_000, NOW):
            put = ms.put_message(
                Message(topic="orders", body=b"now", queue_id=1, properties={"TIMER_DELIVER_MS": str(when)})
            )
            assert (put.topic, put.queue_id) == ("orders", 1)
            props = ms.get_by_commitlog_offset(put.commitlog_offset).properties  # type: ignore[union-attr]
            assert props["TIMER_DELIVER_MS"] == str(when) and "TIMER_OUT_MS" not in props
        with pytest.raises(TimerIllegal):  # a recall marker for the past is refused
            ms.put_message(
                Message(
                    topic="orders",
                    body=b"0",
                    properties={"TIMER_DELIVER_MS": str(NOW - 1), "TIMER_DEL_UNIQKEY": "orders+X"},
                )
            )


def test_a_delay_level_wins_and_drops_the_timer_properties(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        ms.create_topic("orders", 1)
        put = ms.put_message(
            Message(
                topic="orders", body=b"b", delay_level=2, properties={"TIMER_DELAY_MS": "60000", "u": "1"}
            )
        )
        assert (put.topic, put.queue_id) == (SCHEDULE_TOPIC, 1)
        props = ms.get_by_commitlog_offset(put.commitlog_offset).properties  # type: ignore[union-attr]
        assert not any(name.startswith("TIMER_") for name in props) and props["u"] == "1"


def test_level_zero_is_no_delay_and_above_the_table_clamps(tmp_path: Path) -> None:
    with open_store(tmp_path, delay_levels="1s 2s 3s") as ms:
        ms.create_topic("orders", 1)
        assert ms.put_message(Message(topic="orders", body=b"b", delay_level=0)).topic == "orders"
        clamped = ms.put_message(Message(topic="orders", body=b"b", delay_level=99))
        assert (clamped.topic, clamped.queue_id) == (SCHEDULE_TOPIC, 2)
        props = ms.get_by_commitlog_offset(clamped.commitlog_offset).properties  # type: ignore[union-attr]
        assert props["DELAY"] == "3"


def test_put_batch_refuses_scheduling_properties(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms, pytest.raises(Exception, match="put_messages"):
        ms.put_batch("orders", [b"a"], properties={"TIMER_DELAY_MS": ["5"]})


#: A timer message parked by the store, byte for byte: RocketMQ's transform leaves the user's
#: TIMER_DELAY_SEC, adds TIMER_OUT_MS (rounded down), REAL_TOPIC, REAL_QID; topic
#: rmq_sys_wheel_timer queue 0; tagsCode (ConsumeQueue) stays the TAGS hashCode.
GOLDEN_PARKED_TIMER_HEX = (
    "000000ea daa320a7 6c03b249 00000000 00000000"  # size, magic, body CRC, queue id 0, flag
    "0000000000000000 0000000000000000 00000000"  # queue offset, physical offset, sysflag
    "0000018bcfe5687b 0a010203 00001a85"  # born timestamp, born host 10.1.2.3:6789
    "0000018bcfe5687b 7f000001 00002a9f"  # store timestamp, store host
    "00000000 0000000000000000"  # reconsume times, prepared transaction offset
    "00000005 6c61746572"  # body 'later'
    "13 726d715f7379735f776865656c5f74696d6572"  # topic rmq_sys_wheel_timer
    "0077"  # properties length
    # TIMER_DELAY_SEC=10 UNIQ_KEY=... TAGS=paid TIMER_OUT_MS=1700000010000 REAL_TOPIC=orders REAL_QID=1
    "54494d45525f44454c41595f53454301313002554e49515f4b4559014649584544554e49515f4b45595f30303030303030303031025441475301706169640254494d45525f4f55545f4d530131373030303030303130303030025245414c5f544f504943016f7264657273025245414c5f514944013102"
)


def test_parked_timer_record_bytes(tmp_path: Path) -> None:
    with open_store(tmp_path) as ms:
        ms.create_topic("orders", 4)
        put = ms.put_message(
            Message(
                topic="orders",
                body=b"later",
                tags="paid",
                queue_id=1,
                properties={"TIMER_DELAY_SEC": "10"},
                born_host=("10.1.2.3", 6789),
                uniq_key="FIXEDUNIQ_KEY_0000000001",
            )
        )
        assert (put.topic, put.queue_id) == (TIMER_TOPIC, 0)
        raw = ms.read_record(put.commitlog_offset)
        check = check_record(raw, 0, check_crc=True)
        assert check.properties == {
            "TIMER_DELAY_SEC": "10",
            "UNIQ_KEY": "FIXEDUNIQ_KEY_0000000001",
            "TAGS": "paid",
            "TIMER_OUT_MS": str(timer_out_ms(NOW + 10_000, 1000)),
            "REAL_TOPIC": "orders",
            "REAL_QID": "1",
        }
        header = check.header
        assert header is not None and header.born_timestamp == NOW and header.store_timestamp == NOW
        assert len(raw) == header.total_size and raw[: RECORD_HEADER.size]
        assert raw.hex() == GOLDEN_PARKED_TIMER_HEX.replace(" ", "")
        # The ConsumeQueue tagsCode of the timer topic is the TAGS hashCode (a tag filter matches).
        assert len(ms.get_messages(TIMER_TOPIC, 0, 0, 1, tag_expression="paid").messages) == 1
        assert len(ms.get_messages(TIMER_TOPIC, 0, 0, 1, tag_expression="other").messages) == 0
