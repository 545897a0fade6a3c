"""Vectorised CommitLog -> Arrow decoding, checked against a per-record reference.

The reference decodes each record with :func:`store.format.record.decode_record` (obviously correct,
slow) and builds the same ``MESSAGE_SCHEMA`` batch; the vectorised decoder must equal it
exactly, for Hypothesis-generated slices: random bodies (empty, > 4 KiB and compressed),
optional TAGS/KEYS/UNIQ_KEY and other properties, unicode, V2 topics (> 127 bytes), several
topics, gaps between records, unsorted and repeated starts.
"""

from __future__ import annotations

import mmap
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.errors import CorruptStore, InvalidArgument
from store.format import arrow_ranges, batch_decode, property_columns
from store.format.arrow_schema import COLUMN_PROPERTIES, MESSAGE_SCHEMA
from store.format.batch_decode import decode_int_field, decode_records_to_arrow, decode_store_timestamps
from store.format.ids import encode_msg_id
from store.format.record import (
    BODY_POS,
    MAGIC_POS,
    PROPS_LEN,
    QUEUE_ID_POS,
    TOTAL_SIZE_POS,
    BodyPolicy,
    RecordFields,
    encode_record,
    prepare_body,
)
from store.format.record_check import decode_record

COMPRESS_OVER = 4096
POLICY = BodyPolicy(max_body_bytes=1 << 20, compress_over_bytes=COMPRESS_OVER)


# --- the reference ---------------------------------------------------------------------------


def reference_batch(
    buf: bytes, starts: Sequence[int], store_host: tuple[str, int] | None = None
) -> pa.RecordBatch:
    """One :func:`decode_record` per start, assembled into a ``MESSAGE_SCHEMA`` batch."""
    rows = []
    for start in starts:
        view = decode_record(buf, start)
        props = view.properties
        rows.append(
            {
                "topic": view.topic,
                "queue_id": view.queue_id,
                "queue_offset": view.queue_offset,
                "commitlog_offset": view.commitlog_offset,
                "msg_id": view.msg_id
                if store_host is None
                else encode_msg_id(store_host, view.commitlog_offset),
                "uniq_key": view.uniq_key,
                "tags": view.tags,
                "keys": view.keys,
                "body": view.body,
                "properties": [(k, v) for k, v in props.items() if k not in COLUMN_PROPERTIES],
                "born_timestamp": view.born_timestamp_ms * 1000,
                "store_timestamp": view.store_timestamp_ms * 1000,
                "reconsume_times": view.reconsume_times,
            }
        )
    return pa.RecordBatch.from_pylist(rows, schema=MESSAGE_SCHEMA)


def assert_same(actual: pa.RecordBatch, expected: pa.RecordBatch) -> None:
    assert actual.schema == MESSAGE_SCHEMA
    actual.validate(full=True)
    for name in MESSAGE_SCHEMA.names:
        assert actual.column(name).to_pylist() == expected.column(name).to_pylist(), name
    assert actual.equals(expected)


# --- building slices -------------------------------------------------------------------------


def stored(fields: RecordFields) -> RecordFields:
    """The record as the store writes it: large bodies zlib-compressed and flagged."""
    body, sys_flag = prepare_body(fields.body, POLICY)
    return fields._replace(body=body, sys_flag=fields.sys_flag | sys_flag)


def build_slice(records: Sequence[RecordFields], gaps: Sequence[bytes] = ()) -> tuple[bytes, list[int]]:
    """Records laid out one after another, ``gaps[i]`` of junk before record i."""
    parts: list[bytes] = []
    starts: list[int] = []
    position = 0
    for i, fields in enumerate(records):
        gap = gaps[i] if i < len(gaps) else b""
        position += len(gap)
        encoded = encode_record(stored(fields)._replace(physical_offset=position + 1_000_000))
        parts += [gap, encoded]
        starts.append(position)
        position += len(encoded)
    return b"".join(parts), starts


def as_array(buf: bytes) -> npt.NDArray[np.uint8]:
    return np.frombuffer(buf, dtype=np.uint8)


# --- strategies ------------------------------------------------------------------------------

_text = st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",))
names = st.text(_text, min_size=1, max_size=12)
values = st.text(_text, min_size=0, max_size=16)  # empty values are dropped by the encoder
keys = st.lists(
    st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)), max_size=8),
    max_size=4,
)
hosts = st.tuples(st.sampled_from(["127.0.0.1", "10.0.0.7", "192.168.255.1"]), st.integers(0, 65535))
topics = st.one_of(
    st.sampled_from(["orders", "payments", "%RETRY%group"]),
    st.text(_text, min_size=1, max_size=80),  # unicode: may pass 127 bytes -> V2
    st.text(st.sampled_from("abcXYZ-_"), min_size=120, max_size=300),  # around and past V1's 127
)
bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=COMPRESS_OVER + 1, max_size=COMPRESS_OVER + 3000),
    st.builds(lambda n, b: b * n, st.integers(1000, 3000), st.binary(min_size=1, max_size=8)),
)


@st.composite
def records(draw: st.DrawFn) -> RecordFields:
    properties = draw(st.dictionaries(names, values, max_size=4))
    if draw(st.booleans()):
        properties["TAGS"] = draw(values)
    if draw(st.booleans()):
        properties["KEYS"] = " ".join(draw(keys))
    if draw(st.booleans()):
        properties["UNIQ_KEY"] = draw(st.text(st.sampled_from("0123456789ABCDEF"), min_size=1, max_size=32))
    return RecordFields(
        topic=draw(topics),
        body=draw(bodies),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        properties=properties,
        born_timestamp_ms=draw(st.integers(0, 2**45)),
        store_timestamp_ms=draw(st.integers(0, 2**45)),
        born_host=draw(hosts),
        store_host=draw(hosts),
        reconsume_times=draw(st.integers(0, 16)),
        queue_offset=draw(st.integers(0, 2**62)),
    )


@pytest.fixture(params=["one chunk", "tiny chunks"])
def chunking(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test as is, and with 2-row chunks so that every cross-chunk path is exercised."""
    if request.param == "tiny chunks":
        for module in (batch_decode, property_columns):
            monkeypatch.setattr(module, "CHUNK_ROWS", 2)
    return str(request.param)


# --- properties against the reference --------------------------------------------------------


# The chunking fixture only sets a module constant for the whole test: safe to share.
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)
@given(st.lists(records(), min_size=1, max_size=12), st.lists(st.binary(max_size=24), max_size=12), st.data())
def test_matches_per_record_reference(
    chunking: str, recs: list[RecordFields], gaps: list[bytes], data: st.DataObject
) -> None:
    buf, starts = build_slice(recs, gaps)
    order = data.draw(st.sampled_from(["ascending", "shuffled", "repeated"]))
    if order == "shuffled":
        starts = data.draw(st.permutations(starts))
    elif order == "repeated":
        starts = data.draw(st.lists(st.sampled_from(starts), min_size=1, max_size=20))
    assert_same(decode_records_to_arrow(as_array(buf), np.array(starts)), reference_batch(buf, starts))


@settings(max_examples=30, deadline=None)
@given(st.lists(records(), min_size=1, max_size=6), hosts)
def test_store_host_override_builds_msg_ids_from_it(recs: list[RecordFields], host: tuple[str, int]) -> None:
    buf, starts = build_slice(recs)
    batch = decode_records_to_arrow(as_array(buf), np.array(starts), store_host=host)
    assert_same(batch, reference_batch(buf, starts, store_host=host))


def test_one_thousand_mixed_records_with_gaps(chunking: str) -> None:
    recs = [
        RecordFields(
            topic=("t" * 200 if i % 7 == 0 else f"topic-{i % 3}"),
            body=(bytes(range(256)) * 40 if i % 11 == 0 else f"body-{i}".encode()),
            queue_id=i % 4,
            queue_offset=i,
            properties={"UNIQ_KEY": f"{i:032X}", "TAGS": "TagA", "KEYS": f"k{i} o{i}", "WAIT": "true"}
            if i % 5
            else {"é": "ü" * (i % 9 + 1)},
            store_host=("10.0.0.7", 10911) if i % 13 else ("10.0.0.8", 10912),
            store_timestamp_ms=1_763_700_000_000 + i,
        )
        for i in range(1000)
    ]
    buf, starts = build_slice(recs, [b"\x00" * (i % 3) for i in range(1000)])
    assert_same(decode_records_to_arrow(as_array(buf), np.array(starts)), reference_batch(buf, starts))


@pytest.mark.parametrize(
    "names",
    [
        ["ab", "ab", "ac"],  # short topics are compared as masked words ending at the topic
        ["orders"] * 5 + ["orderz"],
        ["x" * 60, "x" * 60, "x" * 59 + "y"],  # several words, the last one overlapping
        ["x" * 16, "x" * 15 + "y"],
        ["t", "t", "tt"],
        ["é" * 40] * 3,
        ["", "", ""],
        ["", "a"],
    ],
)
def test_topic_column_when_topics_are_equal_or_nearly(chunking: str, names: list[str]) -> None:
    recs = [RecordFields(topic=t, body=bytes([i]) * (i + 7)) for i, t in enumerate(names)]
    buf, starts = build_slice(recs, [b"\xff" * 9] * len(recs))
    assert_same(decode_records_to_arrow(as_array(buf), np.array(starts)), reference_batch(buf, starts))
    same = build_slice(recs[:1] * 3, [b"\xee" * 3] * 3)
    batch = decode_records_to_arrow(as_array(same[0]), np.array(same[1]))
    assert batch.column("topic").to_pylist() == [names[0]] * 3


def test_compressed_bodies_are_inflated() -> None:
    big = b"0123456789abcdef" * 1000
    buf, starts = build_slice([RecordFields(topic="t", body=big), RecordFields(topic="t", body=b"small")])
    assert decode_record(buf, starts[0]).sys_flag & 1, "the fixture must really compress"
    batch = decode_records_to_arrow(as_array(buf), np.array(starts))
    assert batch.column("body").to_pylist() == [big, b"small"]


# --- shape and inputs ------------------------------------------------------------------------


def test_empty_input_gives_empty_batch_with_schema() -> None:
    batch = decode_records_to_arrow(np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64))
    assert batch.num_rows == 0
    assert batch.schema == MESSAGE_SCHEMA
    assert decode_records_to_arrow(b"\x00" * 10, []).schema == MESSAGE_SCHEMA


def test_schema_is_exactly_message_schema_including_nullability() -> None:
    buf, starts = build_slice([RecordFields(topic="t", body=b"x", properties={"TAGS": "a"})])
    batch = decode_records_to_arrow(as_array(buf), np.array(starts))
    assert batch.schema == MESSAGE_SCHEMA
    assert [f.nullable for f in batch.schema] == [f.nullable for f in MESSAGE_SCHEMA]
    assert batch.schema.field("properties").type == MESSAGE_SCHEMA.field("properties").type


def test_accepts_bytes_memoryview_and_mmap() -> None:
    buf, starts = build_slice([RecordFields(topic="t", body=b"x" * i, queue_offset=i) for i in range(5)])
    expected = reference_batch(buf, starts)
    assert_same(decode_records_to_arrow(buf, starts), expected)
    assert_same(decode_records_to_arrow(memoryview(buf), np.array(starts, dtype=np.int32)), expected)
    with mmap.mmap(-1, len(buf) + 100) as region:
        region[: len(buf)] = buf
        view = memoryview(region)
        try:
            assert_same(decode_records_to_arrow(np.frombuffer(view, dtype=np.uint8), starts), expected)
        finally:
            view.release()


def test_rejects_unusable_buffers() -> None:
    with pytest.raises(InvalidArgument):
        decode_records_to_arrow(np.zeros((2, 2), dtype=np.uint8), [0])
    with pytest.raises(InvalidArgument):
        decode_records_to_arrow(np.zeros(200, dtype=np.int32), [0])
    with pytest.raises(InvalidArgument):
        decode_records_to_arrow(np.zeros(200, dtype=np.uint8), [0.0, 1.5])


# --- properties that are not in the canonical encoding ---------------------------------------


def _with_properties(raw: bytes) -> tuple[bytes, list[int]]:
    """One record whose properties bytes are replaced by ``raw`` (same length as written)."""
    placeholder = {"P": "x" * (len(raw) - 3)}  # "P\x01" + value + "\x02"
    buf, starts = build_slice([RecordFields(topic="t", body=b"b", properties=placeholder)] * 2)
    out = bytearray(buf)
    for start in starts:
        end = start + int.from_bytes(buf[start + TOTAL_SIZE_POS : start + TOTAL_SIZE_POS + 4], "big")
        out[end - len(raw) : end] = raw
    return bytes(out), starts


@pytest.mark.parametrize(
    "raw",
    [
        b"A\x01xyz\x01",  # no trailing \x02, a \x01 inside the value
        b"\x02A\x01xy\x02",  # an empty item first
        b"A\x01\x02B\x01c\x02",  # an empty value
        b"TAGS\x01a\x02TAGS\x01b\x02",  # a column property twice: last wins
        b"A\xff\x01xyz\x02",  # not UTF-8: replaced like decode_properties does
        b"KEYS\x01  a\x02",  # empty key tokens
        b"justtext",
    ],
)
def test_non_canonical_properties_fall_back_to_codec_semantics(chunking: str, raw: bytes) -> None:
    buf, starts = _with_properties(raw)
    assert_same(decode_records_to_arrow(as_array(buf), np.array(starts)), reference_batch(buf, starts))


def test_pair_straddling_two_records_is_not_parsed_across_them(chunking: str) -> None:
    # Concatenated, the two properties strings look canonical ("AB\x01bc\x02C\x01d\x02"), but the
    # first record's do not end with \x02: each record must be parsed on its own.
    buf, starts = build_slice([RecordFields(topic="t", body=b"b", properties={"P": "xx"})] * 2)
    out = bytearray(buf)
    for start, raw in zip(starts, [b"AB\x01bc", b"\x02C\x01d\x02"], strict=True):
        end = start + int.from_bytes(buf[start + TOTAL_SIZE_POS : start + TOTAL_SIZE_POS + 4], "big")
        out[end - len(raw) : end] = raw
    batch = decode_records_to_arrow(bytes(out), starts)
    assert batch.column("properties").to_pylist() == [[("AB", "bc")], [("C", "d")]]
    assert_same(batch, reference_batch(bytes(out), starts))


# --- corruption ------------------------------------------------------------------------------


def _two_records() -> tuple[bytearray, list[int]]:
    buf, starts = build_slice([RecordFields(topic="t", body=b"abc"), RecordFields(topic="u", body=b"de")])
    return bytearray(buf), starts


def _put_i32(buf: bytearray, at: int, value: int) -> None:
    buf[at : at + 4] = value.to_bytes(4, "big", signed=True)


def test_bad_magic_names_the_position() -> None:
    buf, starts = _two_records()
    _put_i32(buf, starts[1] + MAGIC_POS, 0x12345678)
    with pytest.raises(CorruptStore, match=f"position {starts[1]}: bad magic"):
        decode_records_to_arrow(as_array(bytes(buf)), starts)


@pytest.mark.parametrize(
    ("field", "delta", "reason"),
    [
        (TOTAL_SIZE_POS, 1, "lengths do not add up"),
        (TOTAL_SIZE_POS, -80, "impossible total size"),
        (BODY_POS - 4, 50, "body"),
    ],
)
def test_inconsistent_lengths_are_corrupt(field: int, delta: int, reason: str) -> None:
    buf, starts = _two_records()
    at = starts[0] + field
    _put_i32(buf, at, int.from_bytes(buf[at : at + 4], "big", signed=True) + delta)
    with pytest.raises(CorruptStore, match=reason):
        decode_records_to_arrow(as_array(bytes(buf)), starts[:1])


def test_large_slice_path_gives_the_same_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Slices over 2 GiB are gathered through large_binary/large_string; force that path.
    recs = [
        RecordFields(topic=f"t{i % 2}", body=b"x" * i, properties={"TAGS": "a", "K": "v"}) for i in range(9)
    ]
    buf, starts = build_slice(recs)
    monkeypatch.setattr(arrow_ranges, "_LARGE_SOURCE_BYTES", 16)
    assert_same(decode_records_to_arrow(buf, starts), reference_batch(buf, starts))


def test_starts_outside_or_overlapping_are_corrupt(chunking: str) -> None:
    buf, starts = _two_records()
    with pytest.raises(CorruptStore, match="past the end"):
        decode_records_to_arrow(as_array(bytes(buf)), [len(buf) - 10])
    with pytest.raises(CorruptStore):
        decode_records_to_arrow(as_array(bytes(buf)), [starts[0], starts[0] + 4])
    with pytest.raises(CorruptStore):
        decode_records_to_arrow(as_array(bytes(buf)), [-1])


def test_topic_length_past_the_record_is_corrupt(chunking: str) -> None:
    buf, starts = build_slice([RecordFields(topic="t", body=b"ab")] * 2)
    raw = bytearray(buf)
    for start in starts:
        raw[start + BODY_POS + 2] = 60  # the 1-byte topic length, just after the body
    with pytest.raises(CorruptStore, match="topic length exceeds the record"):
        decode_records_to_arrow(bytes(raw), starts)


def test_non_utf8_topic_is_corrupt() -> None:
    buf, starts = build_slice([RecordFields(topic="ab", body=b"")])
    raw = bytearray(buf)
    raw[BODY_POS + 1] = 0xFF  # first topic byte, after the 1-byte length
    with pytest.raises(CorruptStore, match="topic is not UTF-8"):
        decode_records_to_arrow(as_array(bytes(raw)), starts)


def test_undecompressable_body_is_corrupt() -> None:
    buf, starts = build_slice([RecordFields(topic="t", body=b"z" * 10_000)])
    raw = bytearray(buf)
    raw[BODY_POS : BODY_POS + 4] = b"\x00\x00\x00\x00"  # break the zlib header
    with pytest.raises(CorruptStore, match="does not inflate"):
        decode_records_to_arrow(as_array(bytes(raw)), starts)


# --- single fields ---------------------------------------------------------------------------


def test_store_timestamps_and_single_fields() -> None:
    recs = [
        RecordFields(topic="t", body=b"x" * i, queue_id=i, store_timestamp_ms=10**12 + i) for i in range(20)
    ]
    buf, starts = build_slice(recs, [b"\x07" * i for i in range(20)])
    picked = np.array(starts[::-3])
    assert decode_store_timestamps(as_array(buf), picked).tolist() == [
        decode_record(buf, int(s)).store_timestamp_ms for s in picked
    ]
    queue_ids = decode_int_field(buf, picked, QUEUE_ID_POS)  # the codec's type: int32
    assert queue_ids.dtype == np.dtype(np.int32)
    assert queue_ids.tolist() == [decode_record(buf, int(s)).queue_id for s in picked]
    with pytest.raises(InvalidArgument):
        decode_int_field(buf, [len(buf) - 2], QUEUE_ID_POS, ">i4")
    assert decode_int_field(buf, picked, QUEUE_ID_POS, ">i4").tolist() == queue_ids.tolist()
    with pytest.raises(InvalidArgument):
        decode_int_field(buf, [0], QUEUE_ID_POS, "<i4")
    with pytest.raises(InvalidArgument):
        decode_int_field(buf, [0], QUEUE_ID_POS + 1)  # not a field start: the type is unknown


def test_record_without_properties_has_empty_columns() -> None:
    # A record without properties ends with a zero PROPLEN.
    buf, starts = build_slice([RecordFields(topic="t", body=b"", properties={})])
    assert buf[-PROPS_LEN.size :] == b"\x00\x00"
    batch = decode_records_to_arrow(buf, starts)
    assert batch.column("properties").to_pylist() == [[]]
    assert batch.column("keys").to_pylist() == [[]]
    assert batch.column("tags").to_pylist() == batch.column("uniq_key").to_pylist() == [None]


def test_zlib_is_what_compressed_means() -> None:
    # guard for the fixture: prepare_body compresses with zlib above the threshold
    body, flag = prepare_body(b"a" * (COMPRESS_OVER + 1), POLICY)
    assert flag & 1 and zlib.decompress(body) == b"a" * (COMPRESS_OVER + 1)
