"""Kafka key/headers/value <-> store properties, through the store's real property codec."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ingest_api.kafka.mapping import (
    HEADERS_PROPERTY,
    KEY_PROPERTY,
    record_to_message,
    records_to_columns,
    stored_record,
)
from ingest_api.kafka.records import KafkaRecord
from store.format.record import decode_properties, encode_properties


def _through_store(record: KafkaRecord) -> KafkaRecord:
    """What a Kafka consumer sees after the store persisted the message (properties re-decoded)."""
    message = record_to_message("t", 0, record)
    properties = dict(message.properties)
    if message.keys:
        properties["KEYS"] = " ".join(message.keys)
    stored = decode_properties(encode_properties(properties))
    keys = stored.pop("KEYS", None)
    return stored_record(record.timestamp_ms, message.body, keys, stored)


def test_plain_key_and_headers_are_readable_properties() -> None:
    message = record_to_message("t", 3, KafkaRecord(5, b"order-1", b"v", (("a", b"1"), ("b", b"2"))))
    assert message.keys == ("order-1",)
    assert dict(message.properties) == {"a": "1", "b": "2"}
    assert message.queue_id == 3
    assert message.born_timestamp_ms == 5
    record = KafkaRecord(5, b"order-1", b"v", (("a", b"1"), ("b", b"2")))
    assert _through_store(record) == record


def test_multi_token_key_is_indexed_per_token() -> None:
    message = record_to_message("t", 0, KafkaRecord(0, b"a b", b""))
    assert message.keys == ("a", "b")
    assert KEY_PROPERTY not in message.properties


def test_awkward_keys_are_kept_exactly() -> None:
    for key in (b"\xff\xfe", b"", b" lead", b"a  b", b"tab\x01sep"):
        record = KafkaRecord(0, key, b"v")
        assert KEY_PROPERTY in record_to_message("t", 0, record).properties
        assert _through_store(record).key == key


def test_awkward_headers_use_the_exact_blob() -> None:
    headers = (("dup", b"1"), ("dup", b"2"), ("bin", b"\xff"), ("null", None), ("empty", b""), ("TAGS", b"x"))
    record = KafkaRecord(0, None, b"v", headers)
    message = record_to_message("t", 0, record)
    assert HEADERS_PROPERTY in message.properties
    assert message.properties["dup"] == "1"  # plain ones still projected for other doors
    assert _through_store(record).headers == headers


def test_null_value_and_missing_timestamp() -> None:
    message = record_to_message("t", 0, KafkaRecord(-1, None, None))
    assert message.body == b""
    assert message.born_timestamp_ms is None
    assert _through_store(KafkaRecord(7, None, None)).value is None
    assert _through_store(KafkaRecord(7, None, b"")).value == b""


def test_http_properties_become_headers_but_system_ones_do_not() -> None:
    record = stored_record(9, b"body", "k1 k2", {"color": "red", "UNIQ_KEY": "x", "TAGS": "t", "DELAY": "3"})
    assert record.key == b"k1 k2"
    assert record.headers == (("color", b"red"),)


header_key = st.text(min_size=0, max_size=8)
header_value = st.one_of(st.none(), st.binary(max_size=16), st.text(max_size=8).map(str.encode))


@given(
    key=st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=12).map(str.encode)),
    value=st.one_of(st.none(), st.binary(max_size=32)),
    headers=st.lists(st.tuples(header_key, header_value), max_size=6).map(tuple),
)
def test_any_record_round_trips_exactly(key: bytes | None, value: bytes | None, headers: tuple) -> None:
    record = KafkaRecord(123, key, value, headers)
    assert _through_store(record) == record


def test_columns_for_uniform_records() -> None:
    records = [
        KafkaRecord(i, b"k%d" % i if i % 2 else None, b"v", (("a", b"1"), ("b", b"%d" % i))) for i in range(4)
    ]
    columns = records_to_columns(records, 0, now_ms=99)
    assert columns is not None
    assert columns.keys == [None, "k1", None, "k3"]
    assert columns.properties == {"a": ["1"] * 4, "b": ["0", "1", "2", "3"]}
    assert columns.born_timestamps_ms == [0, 1, 2, 3]
    plain = records_to_columns([KafkaRecord(-1, None, b"x")], 0, now_ms=99)
    assert plain is not None
    assert (plain.keys, plain.properties, plain.born_timestamps_ms) == (None, {}, [99])


def test_columns_refuse_differently_ordered_headers() -> None:
    records = [
        KafkaRecord(0, None, b"", (("a", b"1"), ("b", b"2"))),
        KafkaRecord(0, None, b"", (("b", b"2"),)),
    ]
    assert records_to_columns(records, 0, now_ms=0) is None


def test_the_gateway_store_port_is_a_queue_read_api(tmp_path: Path) -> None:
    from ingest_api.kafka.names import KafkaNamedStore
    from store import MessageStore, StoreConfig
    from tests.store.test_read_api import check_reader, write_sample

    with MessageStore.open(StoreConfig(store_dir=tmp_path / "s", background_services=False)) as store:
        write_sample(store)
        check_reader(KafkaNamedStore(store))
