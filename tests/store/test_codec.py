"""Record codec: golden byte vectors (written by hand from the layout table) and round-trips."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import CorruptStore, InvalidArgument, MessageTooLarge
from store.format import ids
from store.format import record as codec
from store.format.ids import decode_msg_id, encode_msg_id
from store.format.record import (
    BodyPolicy,
    RecordFields,
    decode_properties,
    encode_blank,
    encode_properties,
    encode_record,
    prepare_body,
)
from store.format.record_check import RecordStatus, check_record, decode_record

# topic "T", body b"hi", queue 1, flag 0, queue offset 2, physical offset 3, sysflag 0,
# born ts 4 @ 10.0.0.1:5, store ts 6 @ 10.0.0.2:7, reconsume 0, prepared 0, {"TAGS": "a"}.
GOLDEN_RECORD_HEX = (
    "00000065"  # TOTALSIZE = 91 + 2 (body) + 1 (topic) + 7 (props) = 101
    "daa320a7"  # MAGICCODE V1
    "58932aac"  # BODYCRC: crc32(b"hi") = 0xd8932aac masked to 31 bits
    "00000001"  # QUEUEID
    "00000000"  # FLAG
    "0000000000000002"  # QUEUEOFFSET
    "0000000000000003"  # PHYSICALOFFSET
    "00000000"  # SYSFLAG
    "0000000000000004"  # BORNTIMESTAMP
    "0a000001"
    "00000005"  # BORNHOST 10.0.0.1:5
    "0000000000000006"  # STORETIMESTAMP
    "0a000002"
    "00000007"  # STOREHOST 10.0.0.2:7
    "00000000"  # RECONSUMETIMES
    "0000000000000000"  # PREPARED_TX_OFFSET
    "00000002"
    "6869"  # BODYLEN + "hi"
    "01"
    "54"  # TOPICLEN (1 byte) + "T"
    "0007"
    "5441475301"
    "6102"  # PROPLEN + "TAGS\x01a\x02"
)

GOLDEN_FIELDS = RecordFields(
    topic="T",
    body=b"hi",
    queue_id=1,
    queue_offset=2,
    physical_offset=3,
    born_timestamp_ms=4,
    born_host=("10.0.0.1", 5),
    store_timestamp_ms=6,
    store_host=("10.0.0.2", 7),
    properties={"TAGS": "a"},
)


def test_layout_constants_match_rocketmq() -> None:
    assert (codec.QUEUE_OFFSET_POS, codec.PHYSICAL_OFFSET_POS, codec.SYS_FLAG_POS) == (20, 28, 36)
    assert (codec.STORE_TIMESTAMP_POS, codec.BODY_LEN_POS, codec.BODY_POS) == (56, 84, 88)
    assert (codec.FIXED_OVERHEAD_V1, codec.FIXED_OVERHEAD_V2) == (91, 92)
    assert codec.MAGIC_V1 - (1 << 32) == -626843481
    assert codec.BLANK_MAGIC - (1 << 32) == -875286124


def test_golden_record_bytes() -> None:
    assert encode_record(GOLDEN_FIELDS).hex() == GOLDEN_RECORD_HEX


def test_golden_record_decodes() -> None:
    view = decode_record(bytes.fromhex(GOLDEN_RECORD_HEX))
    assert view.topic == "T"
    assert view.body == b"hi"
    assert (view.queue_id, view.queue_offset, view.commitlog_offset) == (1, 2, 3)
    assert view.born_host == ("10.0.0.1", 5)
    assert view.store_host == ("10.0.0.2", 7)
    assert view.tags == "a"
    assert view.size_bytes == 101
    assert view.msg_id == "0A000002000000070000000000000003"


def test_golden_blank_record() -> None:
    assert encode_blank(4000).hex() == "00000fa0cbd43194"
    check = check_record(encode_blank(4000) + bytes(100), 0, check_crc=True)
    assert (check.status, check.size) == (RecordStatus.BLANK, 4000)


def test_golden_v2_record_for_long_topic() -> None:
    topic = "t" * 200
    rec = RecordFields(topic=topic, body=b"", store_host=("1.2.3.4", 10911))
    expected = (
        f"{92 + 200:08x}"  # TOTALSIZE = 92 + topic
        "daa320ab"  # MAGICCODE V2
        "00000000"  # crc32(b"") = 0
        "00000000"
        "00000000"  # QUEUEID, FLAG
        + "00" * 16  # QUEUEOFFSET, PHYSICALOFFSET
        + "00000000"  # SYSFLAG
        + "00" * 8  # BORNTIMESTAMP
        + "7f000001"
        "00000000"  # BORNHOST 127.0.0.1:0
        + "00"
        * 8  # STORETIMESTAMP
        + "01020304"
        "00002a9f"  # STOREHOST 1.2.3.4:10911
        + "00000000"  # RECONSUMETIMES
        + "00" * 8  # PREPARED_TX_OFFSET
        + "00000000"  # BODYLEN
        + "00c8"
        + "74" * 200  # TOPICLEN (2 bytes) + topic
        + "0000"  # PROPLEN
    )
    assert encode_record(rec).hex() == expected
    assert decode_record(encode_record(rec)).topic == topic


def test_golden_msg_id() -> None:
    assert encode_msg_id(("192.168.0.1", 10911), 0x1234) == "C0A8000100002A9F0000000000001234"
    assert decode_msg_id("C0A8000100002A9F0000000000001234") == (("192.168.0.1", 10911), 0x1234)
    with pytest.raises(InvalidArgument):
        decode_msg_id("XYZ")


def test_hosts_are_ipv4() -> None:
    assert ids.ip4_bytes("10.0.0.1") == b"\x0a\x00\x00\x01"
    assert ids.ip4_bytes("::ffff:10.0.0.1") == b"\x0a\x00\x00\x01"
    for bad in ("::1", "localhost", "1.2.3"):
        with pytest.raises(InvalidArgument):
            ids.ip4_bytes(bad)


def test_golden_uniq_key() -> None:
    prefix = ids.uniq_key_prefix("10.0.0.1", 0x1234, 0xCAFEBABE)
    assert prefix == "0A0000011234CAFEBABE"
    key = ids.encode_uniq_key(prefix, 0x01020304, 0xFFFF)
    assert key == "0A0000011234CAFEBABE01020304FFFF"
    assert ids.decode_uniq_key(key) == ("10.0.0.1", 0x1234, 0xCAFEBABE, 0x01020304, 0xFFFF)


def test_properties_trailing_separator_like_rocketmq() -> None:
    assert encode_properties({"KEYS": "a b", "TAGS": "x"}) == b"KEYS\x01a b\x02TAGS\x01x\x02"
    assert encode_properties({}) == b""
    assert decode_properties(b"KEYS\x01a b\x02TAGS\x01x\x02") == {"KEYS": "a b", "TAGS": "x"}
    assert decode_properties(b"A\x01\x02\x01B\x02C\x01d") == {"C": "d"}  # Java drops empty parts
    for bad in ({"A": "x\x02y"}, {"A\x01": "x"}, {"": "x"}, {"A": "1", "": "x"}, {"A": "\x01"}):
        with pytest.raises(InvalidArgument):
            encode_properties(bad)
    with pytest.raises(MessageTooLarge):
        encode_properties({"A": "x" * 40_000})


def test_body_too_large_names_the_size() -> None:
    with pytest.raises(MessageTooLarge, match="5000 bytes"):
        prepare_body(b"x" * 5000, BodyPolicy(max_body_bytes=4096, compress_over_bytes=1 << 30))


def test_large_body_stored_compressed_and_restored() -> None:
    body = b"abc" * 3000
    stored, flags = prepare_body(body, BodyPolicy(1 << 20, 4096))
    assert flags == codec.SYSFLAG_COMPRESSED | codec.SYSFLAG_COMPRESSION_ZLIB == 0x301
    assert stored == zlib.compress(body, 5)
    raw = encode_record(RecordFields(topic="t", body=stored, sys_flag=flags))
    view = decode_record(raw)
    assert view.body == body
    assert view.body_crc == zlib.crc32(stored) & 0x7FFFFFFF


def test_small_body_stored_as_is() -> None:
    assert prepare_body(b"x" * 4096, BodyPolicy(1 << 20, 4096)) == (b"x" * 4096, 0)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:50], "past the end"),
        (lambda b: b[:4] + b"\x00\x00\x00\x01" + b[8:], "bad magic"),
        (lambda b: b[:89] + b"X" + b[90:], "CRC"),
        (lambda b: b"\x00\x00\x00\x10" + b[4:], "impossible total size"),
        (lambda b: b[:84] + b"\x00\x00\x00\x09" + b[88:], "exceeds"),
    ],
)
def test_check_record_reports_damage(damage: object, reason: str) -> None:
    raw = bytes.fromhex(GOLDEN_RECORD_HEX)
    check = check_record(damage(raw), 0, check_crc=True)  # type: ignore[operator]
    assert check.status is RecordStatus.CORRUPT
    assert reason in check.reason
    with pytest.raises(CorruptStore):
        decode_record(damage(raw), check_crc=True)  # type: ignore[operator]


def test_check_record_zero_tail_is_end() -> None:
    assert check_record(bytes(64), 0, check_crc=True).status is RecordStatus.END
    assert check_record(bytes(4), 0, check_crc=True).status is RecordStatus.END


# --- Hypothesis round-trips --------------------------------------------------------------------

_prop_text = st.text(
    alphabet=st.characters(exclude_characters="\x01\x02", exclude_categories=["Cs"]),
    min_size=1,
    max_size=20,
)
_props = st.dictionaries(_prop_text, _prop_text, max_size=6)
_ip = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
_host = st.tuples(_ip, st.integers(0, 65535))
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)

_records = st.builds(
    RecordFields,
    topic=st.text(min_size=1, max_size=140),
    body=st.binary(max_size=300),
    queue_id=_i32,
    flag=_i32,
    properties=_props,
    sys_flag=st.sampled_from([0, 0x2, 0x4, 0x8, 0xC]),
    born_timestamp_ms=_i64,
    born_host=_host,
    store_timestamp_ms=_i64,
    store_host=_host,
    reconsume_times=_i32,
    prepared_transaction_offset=_i64,
    queue_offset=_i64,
    physical_offset=_i64,
)


@settings(max_examples=200, deadline=None)
@given(_records)
def test_record_round_trip(rec: RecordFields) -> None:
    raw = encode_record(rec)
    check = check_record(b"\x00" * 3 + raw, 3, check_crc=True)
    assert (check.status, check.size) == (RecordStatus.OK, len(raw))
    view = decode_record(raw)
    assert view.topic == rec.topic
    assert view.body == rec.body
    assert view.properties == dict(rec.properties or {})
    assert (view.queue_id, view.flag, view.sys_flag) == (rec.queue_id, rec.flag, rec.sys_flag)
    assert (view.queue_offset, view.commitlog_offset) == (rec.queue_offset, rec.physical_offset)
    assert view.born_timestamp_ms == rec.born_timestamp_ms
    assert view.store_timestamp_ms == rec.store_timestamp_ms
    assert (view.born_host, view.store_host) == (rec.born_host, rec.store_host)
    assert view.reconsume_times == rec.reconsume_times
    assert view.prepared_transaction_offset == rec.prepared_transaction_offset
    assert view.size_bytes == len(raw)


@given(_props)
def test_properties_round_trip(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@given(_host, st.integers(0, 2**63 - 1))
def test_msg_id_round_trip(host: tuple[str, int], offset: int) -> None:
    msg_id = encode_msg_id(host, offset)
    assert len(msg_id) == 32
    assert msg_id == msg_id.upper()
    assert decode_msg_id(msg_id) == (host, offset)


@given(st.binary(max_size=10_000), st.integers(0, 5000))
def test_body_policy_round_trip(body: bytes, threshold: int) -> None:
    stored, flags = prepare_body(body, BodyPolicy(1 << 20, threshold))
    assert codec.restore_body(stored, flags) == body
    assert bool(flags & codec.SYSFLAG_COMPRESSED) == (len(body) > threshold)


@given(st.dictionaries(st.text(alphabet="a\x01\x02", max_size=3), st.text(alphabet="b\x01\x02", max_size=3)))
def test_properties_refused_exactly_when_separators_or_empty_names(props: dict[str, str]) -> None:
    bad = any(v and (not k or {"\x01", "\x02"} & set(k + v)) for k, v in props.items())
    if bad:
        with pytest.raises(InvalidArgument):
            encode_properties(props)
    else:
        assert decode_properties(encode_properties(props)) == {k: v for k, v in props.items() if v}
