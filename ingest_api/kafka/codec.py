"""Adapter over kafka-python's protocol classes, used server-side as the Kafka codec.

kafka-python (pinned ``>=3.0.12,<3.1``) generates one ``ApiMessage`` class per request and
response from Apache Kafka's JSON schemas and encodes every version, flexible or not, with the
right header version. It is untyped and internal API, so everything that touches it lives
here: the rest of the gateway sees :class:`KafkaRequest` and passes response fields back.
Message objects are ``Any`` on purpose; field names are the schema's, in snake_case.

The one response not built by kafka-python is the KIP-511 fallback: an ApiVersions request
of a version we cannot parse gets error 35 with a **v0** body (laid out by
``API_VERSIONS_V0_*`` below) so both clients retry at a version we support.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kafka.protocol.admin as kafka_admin
import kafka.protocol.consumer as kafka_consumer
import kafka.protocol.metadata as kafka_metadata
import kafka.protocol.producer as kafka_producer
from kafka.protocol.api_message import ApiMessage

from ingest_api.kafka.errors import ErrorCode, MalformedFrame, UnsupportedRequest
from ingest_api.kafka.framing import FRAME_SIZE, peek_request_prefix
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey, is_supported

#: ApiVersions v0 response body: error_code i16, then an int32-counted array of entries.
API_VERSIONS_V0_HEAD = struct.Struct(">hi")
#: One ApiVersions v0 entry: api_key i16, min_version i16, max_version i16.
API_VERSIONS_V0_ENTRY = struct.Struct(">hhh")
#: Response header v0: correlation_id i32.
RESPONSE_HEADER_V0 = struct.Struct(">i")


def _scan_classes() -> tuple[dict[int, Any], dict[int, Any]]:
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    for module in (kafka_metadata, kafka_consumer, kafka_producer, kafka_admin):
        for name in dir(module):
            obj: Any = getattr(module, name)
            if not (isinstance(obj, type) and issubclass(obj, ApiMessage)):
                continue
            message_class: Any = obj
            if getattr(message_class, "_json", None):
                target = requests if message_class.is_request() else responses
                target[message_class.API_KEY] = message_class
    return requests, responses


_REQUEST_CLASSES, _RESPONSE_CLASSES = _scan_classes()
_missing = [key for key in SUPPORTED_VERSIONS if key not in _REQUEST_CLASSES or key not in _RESPONSE_CLASSES]
if _missing:  # pragma: no cover - only if the pinned kafka-python changes shape
    raise ImportError(f"kafka-python lacks protocol classes for {_missing}")


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """A decoded request: header fields plus the kafka-python body object (``Any``)."""

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def response_class(api_key: ApiKey) -> Any:
    """The kafka-python response class; nested structs are its attributes."""
    return _RESPONSE_CLASSES[api_key]


def request_class(api_key: ApiKey) -> Any:
    return _REQUEST_CLASSES[api_key]


def decode_request(frame: bytes) -> KafkaRequest:
    """Decode one request frame (size prefix already removed).

    Raises :class:`UnsupportedRequest` for keys/versions not advertised (ApiVersions callers
    should check :func:`needs_api_versions_fallback` first) and :class:`MalformedFrame` when
    the bytes do not decode.
    """
    prefix = peek_request_prefix(frame)
    if not is_supported(prefix.api_key, prefix.api_version):
        raise UnsupportedRequest(
            f"api_key {prefix.api_key} version {prefix.api_version} is not supported "
            f"(correlation_id {prefix.correlation_id})"
        )
    api_key = ApiKey(prefix.api_key)
    try:
        body = _REQUEST_CLASSES[api_key].decode(frame, version=prefix.api_version, header=True)
    except Exception as exc:  # the untyped codec raises struct.error, ValueError, IndexError...
        raise MalformedFrame(
            f"cannot decode {api_key.name} v{prefix.api_version} "
            f"(correlation_id {prefix.correlation_id}): {exc!r}"
        ) from exc
    return KafkaRequest(api_key, prefix.api_version, prefix.correlation_id, body.header.client_id, body)


def needs_api_versions_fallback(api_key: int, api_version: int) -> bool:
    """An ApiVersions request newer than we support: answer with error 35, never close."""
    if api_key != ApiKey.API_VERSIONS:
        return False
    return api_version > SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]


def encode_api_versions_fallback(
    correlation_id: int, supported: Mapping[Any, tuple[int, int]] = SUPPORTED_VERSIONS
) -> bytes:
    """Framed UNSUPPORTED_VERSION answer: response header v0 + ApiVersions **v0** body."""
    entries = sorted(supported.items())
    parts = [
        RESPONSE_HEADER_V0.pack(correlation_id),
        API_VERSIONS_V0_HEAD.pack(ErrorCode.UNSUPPORTED_VERSION, len(entries)),
    ]
    parts.extend(API_VERSIONS_V0_ENTRY.pack(key, low, high) for key, (low, high) in entries)
    payload = b"".join(parts)
    return FRAME_SIZE.pack(len(payload)) + payload


def encode_response(request: KafkaRequest, **fields: Any) -> bytes:
    """Build and frame the response to ``request`` (same API and version)."""
    message = _RESPONSE_CLASSES[request.api_key](version=request.api_version, **fields)
    message.with_header(correlation_id=request.correlation_id)
    return bytes(message.encode(header=True, framed=True))


def expects_response(request: KafkaRequest) -> bool:
    """False for Produce with acks=0: the client waits for nothing and must get nothing."""
    return bool(request.body.expect_response())
