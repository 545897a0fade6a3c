"""SaslHandshake / SaslAuthenticate frames: golden bytes written out field by field from the
Kafka schemas (``Sasl*.json``), a differential test against kafka-python's classes (the
codec every client test uses), and malformed input."""

from __future__ import annotations

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest as KpAuthenticateRequest,
)
from kafka.protocol.sasl import (
    SaslAuthenticateResponse as KpAuthenticateResponse,
)
from kafka.protocol.sasl import (
    SaslHandshakeRequest as KpHandshakeRequest,
)
from kafka.protocol.sasl import (
    SaslHandshakeResponse as KpHandshakeResponse,
)

from ingest_api.kafka.errors import ErrorCode, MalformedFrame
from ingest_api.kafka.sasl import (
    SASL_VERSIONS,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    decode_sasl_authenticate_request,
    decode_sasl_handshake_request,
    encode_raw_token,
    encode_sasl_authenticate_response,
    encode_sasl_handshake_response,
    uvarint,
)


def hexbytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


#: SaslHandshake v1, correlation 7, client "c", mechanism SCRAM-SHA-256.
HANDSHAKE_V1 = hexbytes("0011 0001 00000007 | 0001 63 | 000d 534352414d2d5348412d323536")
#: SaslAuthenticate v0/v1 (header v1) and v2 (header v2, compact bytes), token "\0u\0p".
AUTHENTICATE_V0 = hexbytes("0024 0000 00000007 | 0001 63 | 00000004 00750070")
AUTHENTICATE_V2 = hexbytes("0024 0002 00000007 | 0001 63 | 00 | 05 00750070 | 00")


def test_decode_requests() -> None:
    assert decode_sasl_handshake_request(HANDSHAKE_V1) == SaslHandshakeRequest(1, 7, "c", "SCRAM-SHA-256")
    assert decode_sasl_authenticate_request(AUTHENTICATE_V0) == SaslAuthenticateRequest(0, 7, "c", b"\0u\0p")
    assert decode_sasl_authenticate_request(AUTHENTICATE_V2) == SaslAuthenticateRequest(2, 7, "c", b"\0u\0p")
    tagged = hexbytes("0024 0002 00000007 ffff | 01 01 02 aabb | 02 ff | 00")  # a header tag, skipped
    assert decode_sasl_authenticate_request(tagged) == SaslAuthenticateRequest(2, 7, None, b"\xff")
    null_client = hexbytes("0011 0000 00000001 | ffff | 0005 504c41494e")
    assert decode_sasl_handshake_request(null_client) == SaslHandshakeRequest(0, 1, None, "PLAIN")


def test_handshake_response_golden() -> None:
    framed = encode_sasl_handshake_response(7, ErrorCode.NONE, ["PLAIN", "SCRAM-SHA-256"])
    assert framed == hexbytes(
        "00000020 | 00000007 | 0000 | 00000002 | 0005 504c41494e | 000d 534352414d2d5348412d323536"
    )
    refused = encode_sasl_handshake_response(9, ErrorCode.UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
    assert refused == hexbytes("00000011 | 00000009 | 0021 | 00000001 | 0005 504c41494e")


@pytest.mark.parametrize(
    ("version", "golden"),
    [
        (0, "0000000f | 00000007 | 003a | 0001 78 | 00000002 6162"),
        (1, "00000017 | 00000007 | 003a | 0001 78 | 00000002 6162 | 00000000000003e8"),
        (2, "00000015 | 00000007 00 | 003a | 02 78 | 03 6162 | 00000000000003e8 | 00"),
    ],
)
def test_authenticate_response_golden(version: int, golden: str) -> None:
    response = SaslAuthenticateResponse(version, 7, ErrorCode.SASL_AUTHENTICATION_FAILED, "x", b"ab", 1000)
    assert encode_sasl_authenticate_response(response) == hexbytes(golden)


def test_null_error_message_and_empty_token() -> None:
    ok_v1 = SaslAuthenticateResponse(1, 3, 0, None, b"", 0)
    assert encode_sasl_authenticate_response(ok_v1) == hexbytes(
        "00000014 | 00000003 | 0000 | ffff | 00000000 | 0000000000000000"
    )
    ok_v2 = SaslAuthenticateResponse(2, 3, 0, None, b"", 0)
    assert encode_sasl_authenticate_response(ok_v2) == hexbytes(
        "00000012 | 00000003 00 | 0000 | 00 | 01 | 0000000000000000 | 00"
    )


def test_raw_v0_token() -> None:
    assert encode_raw_token(b"\0u\0p") == hexbytes("00000004 00750070")
    assert encode_raw_token(b"") == hexbytes("00000000")


def test_uvarint() -> None:
    assert [uvarint(v) for v in (0, 1, 127, 128, 300)] == [b"\0", b"\1", b"\x7f", b"\x80\x01", b"\xac\x02"]


@pytest.mark.parametrize("version", [0, 1])
def test_handshake_against_kafka_python(version: int) -> None:
    request = KpHandshakeRequest(version=version, mechanism="SCRAM-SHA-512")
    request.with_header(correlation_id=42, client_id="kafka-python")
    frame = bytes(request.encode(header=True, framed=True))[4:]
    assert decode_sasl_handshake_request(frame) == SaslHandshakeRequest(
        version, 42, "kafka-python", "SCRAM-SHA-512"
    )
    ours = encode_sasl_handshake_response(42, 0, ["SCRAM-SHA-512", "PLAIN"])
    theirs = KpHandshakeResponse(version=version, error_code=0, mechanisms=["SCRAM-SHA-512", "PLAIN"])
    theirs.with_header(correlation_id=42)
    assert ours == bytes(theirs.encode(header=True, framed=True))


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("token", [b"", b"n,,n=user,r=abc", bytes(range(256)) * 3])
def test_authenticate_against_kafka_python(version: int, token: bytes) -> None:
    request = KpAuthenticateRequest(version=version, auth_bytes=token)
    request.with_header(correlation_id=5, client_id="cid")
    frame = bytes(request.encode(header=True, framed=True))[4:]
    assert decode_sasl_authenticate_request(frame) == SaslAuthenticateRequest(version, 5, "cid", token)
    for message in (None, "Authentication failed"):
        ours = SaslAuthenticateResponse(version, 5, 58 if message else 0, message, token, 3_600_000)
        theirs = KpAuthenticateResponse(
            version=version, error_code=ours.error_code, error_message=message, auth_bytes=token,
            session_lifetime_ms=ours.session_lifetime_ms,
        )  # fmt: skip
        theirs.with_header(correlation_id=5)
        expected = bytes(theirs.encode(header=True, framed=True))
        if version == 0:  # v0 has no SessionLifetimeMs: kafka-python drops it as well
            assert len(expected) == len(encode_sasl_authenticate_response(ours))
        assert encode_sasl_authenticate_response(ours) == expected


@pytest.mark.parametrize(
    ("frame", "rule"),
    [
        (HANDSHAKE_V1[:5], "truncated"),
        (HANDSHAKE_V1[:-1], "truncated"),
        (HANDSHAKE_V1 + b"\0", "trailing"),
        (hexbytes("0011 0002 00000007 ffff 0005 504c41494e"), "not this API"),
        (hexbytes("0012 0001 00000007 ffff 0005 504c41494e"), "not this API"),
        (hexbytes("0011 0001 00000007 ffff 0002 ffff"), "UTF-8"),
        (hexbytes("0011 0001 00000007 ffff fffe"), "truncated"),
    ],
)
def test_malformed_handshake(frame: bytes, rule: str) -> None:
    with pytest.raises(MalformedFrame, match=rule):
        decode_sasl_handshake_request(frame)


@pytest.mark.parametrize(
    ("frame", "rule"),
    [
        (AUTHENTICATE_V0[:-1], "truncated"),
        (hexbytes("0024 0000 00000007 ffff 7fffffff 00"), "truncated"),
        (hexbytes("0024 0000 00000007 ffff ffffffff"), "truncated"),  # a null token
        (AUTHENTICATE_V2[:-1], "truncated"),
        (hexbytes("0024 0002 00000007 ffff 00 ffffffffff01"), "varint"),
        (hexbytes("0024 0002 00000007 ffff 00 01 00 00"), "trailing"),
        (hexbytes("0024 0003 00000007 ffff 00 01 00"), "not this API"),
    ],
)
def test_malformed_authenticate(frame: bytes, rule: str) -> None:
    with pytest.raises(MalformedFrame, match=rule):
        decode_sasl_authenticate_request(frame)


def test_tokens_never_show() -> None:
    secret = b"\0alice\0s3cr3t-password"
    request = decode_sasl_authenticate_request(
        hexbytes("0024 0000 00000007 ffff") + len(secret).to_bytes(4) + secret
    )
    assert b"s3cr3t" not in repr(request).encode() and "s3cr3t" not in repr(
        SaslAuthenticateResponse(0, 1, 0, None, secret)
    )
    assert SASL_VERSIONS == {17: (0, 1), 36: (0, 2)}
