"""Golden bytes for framing, header handling and the KIP-511 ApiVersions fallback."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse

from ingest_api.kafka import codec
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.errors import MalformedFrame, UnsupportedRequest
from ingest_api.kafka.framing import frame_payload, parse_frame_size, peek_request_prefix
from ingest_api.kafka.handlers import HANDLERS
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey

# Metadata v8 / v9 requests for topic "ab" from client "c", correlation id 1 (research §4.3).
METADATA_V8 = bytes.fromhex("00030008 00000001 0001 6300000001 0002 6162 00 00 00".replace(" ", ""))
METADATA_V9 = bytes.fromhex("00030009 00000001 0001 63 0002 03 6162 00 00 00 00 00".replace(" ", ""))


def test_frame_size_bounds() -> None:
    assert parse_frame_size(b"\x00\x00\x00\x0a") == 10
    with pytest.raises(MalformedFrame):
        parse_frame_size(b"\x00\x00\x00\x03")  # shorter than any request header
    with pytest.raises(MalformedFrame):
        parse_frame_size(b"\xff\xff\xff\xff")  # negative
    with pytest.raises(MalformedFrame):
        parse_frame_size(b"\x7f\xff\xff\xff")  # 2 GiB, over the limit
    with pytest.raises(MalformedFrame):
        parse_frame_size(b"\x00\x00")
    assert frame_payload(b"abc") == b"\x00\x00\x00\x03abc"


def test_peek_prefix_and_truncation() -> None:
    prefix = peek_request_prefix(METADATA_V8)
    assert (prefix.api_key, prefix.api_version, prefix.correlation_id) == (3, 8, 1)
    with pytest.raises(MalformedFrame):
        peek_request_prefix(b"\x00\x03\x00")


@pytest.mark.parametrize("frame", [METADATA_V8, METADATA_V9])
def test_decode_metadata_classic_and_flexible(frame: bytes) -> None:
    request = codec.decode_request(frame)
    assert request.api_key == ApiKey.METADATA
    assert request.correlation_id == 1
    assert request.client_id == "c"
    assert [t.name for t in request.body.topics] == ["ab"]


def test_truncated_body_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        codec.decode_request(METADATA_V9[:-4])


def test_unadvertised_api_and_version_are_refused() -> None:
    with pytest.raises(UnsupportedRequest):
        codec.decode_request(bytes.fromhex("0001000d0000000100016300"))  # Fetch v13 (topic ids)
    with pytest.raises(UnsupportedRequest):
        codec.decode_request(bytes.fromhex("0044000000000001ffff"))  # key 68 (KIP-848)


def test_api_versions_fallback_golden_v0_body() -> None:
    assert codec.needs_api_versions_fallback(18, 5)
    assert not codec.needs_api_versions_fallback(18, 4)
    assert not codec.needs_api_versions_fallback(3, 99)
    out = codec.encode_api_versions_fallback(9, {ApiKey.API_VERSIONS: (0, 2)})
    # size 16 | correlation 9 | error 35 | 1 entry | key 18, 0..2
    assert out == bytes.fromhex("0000001000000009002300000001001200000002")


def test_api_versions_fallback_is_what_kafka_python_expects() -> None:
    out = codec.encode_api_versions_fallback(7)
    decoded = ApiVersionsResponse.decode(out[4:], version=4, header=True)
    assert decoded.header.correlation_id == 7
    assert decoded.error_code == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert ranges == {int(key): value for key, value in SUPPORTED_VERSIONS.items()}


def _request(api_key: ApiKey, version: int, correlation_id: int) -> KafkaRequest:
    return KafkaRequest(api_key, version, correlation_id, "c", None)


def test_api_versions_v3_response_keeps_header_v0() -> None:
    out = codec.encode_response(
        _request(ApiKey.API_VERSIONS, 3, 5), error_code=0, api_keys=[], throttle_time_ms=0
    )
    # no tagged-field byte after the correlation id, even though the body is flexible
    assert out == bytes.fromhex("0000000c000000050000010000000000")


def test_flexible_response_has_header_tag_byte() -> None:
    out = codec.encode_response(
        _request(ApiKey.FIND_COORDINATOR, 3, 5),
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        node_id=0,
        host="h",
        port=9092,
    )
    assert out[4:9] == bytes.fromhex("0000000500")
    decoded = FindCoordinatorResponse.decode(out[4:], version=3, header=True)
    assert (decoded.host, decoded.port, decoded.header.correlation_id) == ("h", 9092, 5)


def test_every_advertised_api_has_a_handler() -> None:
    assert set(HANDLERS) == set(SUPPORTED_VERSIONS)
    # topic-id versions must never be advertised
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][1] <= 12
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_COMMIT][1] <= 9
    assert SUPPORTED_VERSIONS[ApiKey.OFFSET_FETCH][1] <= 9
    assert SUPPORTED_VERSIONS[ApiKey.DELETE_TOPICS][1] <= 5
    assert SUPPORTED_VERSIONS[ApiKey.PRODUCE][0] >= 3
    assert SUPPORTED_VERSIONS[ApiKey.FETCH][0] >= 4
