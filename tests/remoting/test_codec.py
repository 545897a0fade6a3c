"""Golden bytes for the remoting frame and both header encodings.

The binary vectors are derived by hand from ``RocketMQSerializable.rocketMQProtocolEncode``
(apache/rocketmq 8fc57f14): ``code`` as a Java short, ``language`` as ``LanguageCode.getCode()``
(one byte), ``version`` short, ``opaque`` int, ``flag`` int, then ``remarkLen`` int (0 and no bytes
for a null or empty remark), then the extFields block length int and per entry ``short keyLen,
key, int valLen, value`` (``mapSerialize``); the header's size is ``calTotalLen(remark, ext)`` =
2+1+2+4+4 + 4+remark + 4+ext. ``RemotingCommand.encode`` prefixes ``int length`` (= 4 + header +
body) and ``markProtocolType(headerLength, ROCKETMQ)`` = ``(1 << 24) | headerLength``.
"""

from __future__ import annotations

import dataclasses

import pytest

from ingest_api.remoting.codec import (
    RemotingCommand,
    decode_frame,
    encode_command,
    frame_shortfall,
    parse_frame_length,
    request,
    response_to,
    take_frames,
)
from ingest_api.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, RequestCode, SerializeType
from ingest_api.remoting.errors import FrameTooLarge, MalformedFrame, RemotingProtocolError

# SEND_MESSAGE_V2, opaque 1, extFields {"a": "PG"}, body "hi", ROCKETMQ header.
BINARY_SEND_FRAME = bytes.fromhex(
    "00000024"  # length = 4 + 30 (header) + 2 (body) = 36
    "0100001e"  # (ROCKETMQ=1 << 24) | headerLength 30
    "0136"  # code 310
    "00"  # language JAVA
    "0000"  # version 0
    "00000001"  # opaque 1
    "00000000"  # flag 0 (a request, not one-way)
    "00000000"  # remark: length 0, no bytes (null remark)
    "00000009"  # extFields block: 2 + 1 + 4 + 2 = 9 bytes
    "0001" "61"  # key length 1, "a"
    "00000002" "5047"  # value length 2, "PG"
    "6869"  # body "hi"
)  # fmt: skip

# The answer: SUCCESS, remark "ok", opaque 1, response bit set, NODE_JS language, version 121.
BINARY_RESPONSE_FRAME = bytes.fromhex(
    "0000001b"  # length = 4 + 23
    "01000017"  # ROCKETMQ, header 23 bytes = 2+1+2+4+4 + 4+2 + 4+0
    "0000"  # code 0 SUCCESS
    "0d"  # language NODE_JS (13)
    "0079"  # version 121
    "00000001"  # opaque 1
    "00000001"  # flag: bit 0 = response
    "00000002" "6f6b"  # remark "ok"
    "00000000"  # no extFields
)  # fmt: skip


def test_binary_request_golden_decode() -> None:
    cmd = decode_frame(BINARY_SEND_FRAME[4:])
    assert cmd == RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2,
        opaque=1,
        ext_fields={"a": "PG"},
        body=b"hi",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert parse_frame_length(BINARY_SEND_FRAME[:4]) == len(BINARY_SEND_FRAME) - 4


def test_binary_request_golden_encode() -> None:
    cmd = request(RequestCode.SEND_MESSAGE_V2, 1, {"a": "PG"}, b"hi", serialize_type=SerializeType.ROCKETMQ)
    assert encode_command(cmd) == BINARY_SEND_FRAME


def test_binary_response_golden() -> None:
    cmd = RemotingCommand(
        code=0,
        opaque=1,
        flag=FLAG_RESPONSE,
        language=LanguageCode.NODE_JS,
        version=121,
        remark="ok",
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_command(cmd) == BINARY_RESPONSE_FRAME
    assert decode_frame(BINARY_RESPONSE_FRAME[4:]) == cmd


# What ali-ons 3.12 writes for GET_ROUTEINFO_BY_TOPIC (RemotingCommand.buildHeader: JSON.stringify
# of {code, language, opaque, flag, version, remark, extFields}; remark undefined is left out).
ALI_ONS_ROUTE_HEADER = (
    b'{"code":105,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":{"topic":"T"}}'
)
ALI_ONS_ROUTE_FRAME = (
    (4 + len(ALI_ONS_ROUTE_HEADER)).to_bytes(4, "big")
    + len(ALI_ONS_ROUTE_HEADER).to_bytes(4, "big")  # serialize type JSON = 0 in the top byte
    + ALI_ONS_ROUTE_HEADER
)

# The JSON answer, keys in fastjson's (alphabetical) order, nulls left out.
JSON_RESPONSE_FRAME = (
    b"\x00\x00\x00\xa1"  # length 161 = 4 + 157
    b"\x00\x00\x00\x9d"  # JSON, header 157 bytes
    b'{"code":17,"flag":1,"language":"JAVA","opaque":3,"remark":"No topic route info in name server '
    b'for the topic: T","serializeTypeCurrentRPC":"JSON","version":0}'
)


def test_json_request_golden_decode() -> None:
    cmd = decode_frame(ALI_ONS_ROUTE_FRAME[4:])
    assert cmd == RemotingCommand(
        code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
        opaque=3,
        version=121,
        ext_fields={"topic": "T"},
        serialize_type=SerializeType.JSON,
    )


def test_json_response_golden_encode() -> None:
    req = decode_frame(ALI_ONS_ROUTE_FRAME[4:])
    answer = response_to(req, 17, "No topic route info in name server for the topic: T")
    assert encode_command(answer) == JSON_RESPONSE_FRAME
    assert len(JSON_RESPONSE_FRAME) == 4 + 0xA1 and len(JSON_RESPONSE_FRAME[8:]) == 0x9D


def test_json_ext_field_values_are_read_as_java_strings() -> None:
    """ali-ons puts numbers and booleans in extFields; Java's HashMap<String,String> holds text."""
    header = (
        b'{"code":310,"language":"JAVA","opaque":9,"flag":0,"version":121,"extFields":'
        b'{"a":"PG","d":4,"g":1700000000000,"i":"TAGS\\u0001t\\u0002","k":false,"l":null}}'
    )
    cmd = decode_frame(len(header).to_bytes(4, "big") + header + b"body")
    assert cmd.ext_fields == {"a": "PG", "d": "4", "g": "1700000000000", "i": "TAGS\x01t\x02", "k": "false"}
    assert cmd.body == b"body"


def test_response_keeps_opaque_and_encoding() -> None:
    for kind in SerializeType:
        req = request(RequestCode.HEART_BEAT, 77, serialize_type=kind)
        answer = response_to(req, 0, ext_fields={"x": "1"}, body=b"b")
        assert (answer.opaque, answer.serialize_type, answer.is_response) == (77, kind, True)
        assert decode_frame(encode_command(answer)[4:]) == answer


def test_oneway_flag() -> None:
    cmd = request(RequestCode.UPDATE_CONSUMER_OFFSET, 5, oneway=True)
    assert cmd.flag == FLAG_ONEWAY and cmd.is_oneway and not cmd.is_response


def test_round_trip_unicode_and_many_fields() -> None:
    fields = {f"k{i}": "välue-" + str(i) * i for i in range(50)}
    for kind in SerializeType:
        cmd = RemotingCommand(
            code=12, opaque=-5, flag=2, remark="rémark", ext_fields=fields, serialize_type=kind
        )
        assert decode_frame(encode_command(cmd)[4:]) == cmd


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"\x00\x00", "no header-length word"),
        (b"\x00\x00\x00\x10{}", "header length 16 exceeds"),
        (b"\x00\x00\x00\x02{]", "does not parse"),
        (b"\x00\x00\x00\x02[]", "must be an object"),
        (b"\x00\x00\x00\x02{}", "no 'code'"),
        (b'\x00\x00\x00\x0c{"code":"x"}', "'code' must be an integer"),
        (b'\x00\x00\x00\x1f{"code":1,"extFields":{"a":[]}}', "must be a scalar"),
        (b"\x05\x00\x00\x02{}", "unknown serialize type 5"),
        (b"\x01\x00\x00\x03\x00\x01\x00", "shorter than 13"),
    ],
)
def test_malformed_frames(frame: bytes, message: str) -> None:
    with pytest.raises(MalformedFrame, match=message):
        decode_frame(frame)


def test_binary_lengths_are_checked() -> None:
    header = bytearray(BINARY_SEND_FRAME[8:-2])
    header[13:17] = (1000).to_bytes(4, "big")  # remark length far past the header
    with pytest.raises(MalformedFrame, match="remark length 1000"):
        decode_frame((1 << 24 | len(header)).to_bytes(4, "big") + bytes(header))
    header = bytearray(BINARY_SEND_FRAME[8:-2])
    header[-7:-4] = b"\x00\x00\x00"  # value length 0x00000002 -> 0x00000000: entry ends early
    header[-4:] = (99).to_bytes(4, "big")
    with pytest.raises(MalformedFrame, match="overruns"):
        decode_frame((1 << 24 | len(header)).to_bytes(4, "big") + bytes(header))


def test_frame_length_limits() -> None:
    with pytest.raises(FrameTooLarge, match="exceeds the limit of 1024"):
        parse_frame_length((1025).to_bytes(4, "big"), 1024)
    with pytest.raises(MalformedFrame, match="below the minimum"):
        parse_frame_length((-1).to_bytes(4, "big", signed=True))
    assert parse_frame_length((1024).to_bytes(4, "big"), 1024) == 1024


def test_binary_encoding_refuses_codes_that_do_not_fit() -> None:
    cmd = request(RequestCode.POP_MESSAGE, 1, serialize_type=SerializeType.ROCKETMQ)
    with pytest.raises(RemotingProtocolError, match="code 200050"):
        encode_command(cmd)
    assert decode_frame(
        encode_command(dataclasses.replace(cmd, serialize_type=SerializeType.JSON))[4:]
    ).code == (RequestCode.POP_MESSAGE)


def test_take_frames_cuts_whole_frames_and_keeps_the_rest() -> None:
    second = JSON_RESPONSE_FRAME
    pending = bytearray(BINARY_SEND_FRAME + second + second[:10])
    assert take_frames(pending) == [BINARY_SEND_FRAME[4:], second[4:]]
    assert pending == second[:10]
    assert frame_shortfall(pending) == len(second) - 10
    assert take_frames(pending) == [] and frame_shortfall(b"\x00\x00") == 2 and frame_shortfall(b"") == 0
    pending += second[10:]
    assert [decode_frame(f).remark for f in take_frames(pending)] == [decode_frame(second[4:]).remark]
    assert pending == b""


def test_take_frames_refuses_a_bad_length_after_the_good_frames() -> None:
    pending = bytearray(BINARY_SEND_FRAME + (5000).to_bytes(4, "big") + b"x")
    with pytest.raises(FrameTooLarge, match="5000 exceeds the limit of 4096"):
        take_frames(pending, 4096)
    pending = bytearray(b"\x00\x00\x00\x02{}")
    with pytest.raises(MalformedFrame, match="below the minimum"):
        take_frames(pending)
