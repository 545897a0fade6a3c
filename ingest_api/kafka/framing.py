"""Kafka wire framing: a big-endian int32 size, then that many bytes of header + body.

Request frame::

    +-----------+-------------+-----------------+-------------------+---------------------+
    | size i32  | api_key i16 | api_version i16 | correlation_id i32| client_id, body ... |
    +-----------+-------------+-----------------+-------------------+---------------------+

``size`` counts everything after itself. The first eight header bytes are the same in every
request header version (v0-v2), so they can be read without knowing the API's schema; this is
what lets the gateway answer an ApiVersions request of a version it cannot parse (KIP-511).
Response frame: ``size i32 | correlation_id i32 | [tagged fields] | body``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ingest_api.kafka.errors import MalformedFrame

#: Frame size prefix (bytes that follow).
FRAME_SIZE = struct.Struct(">i")
#: The version-independent start of every request header.
REQUEST_HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
#: Smallest legal request: the prefix plus a null client_id (int16 -1).
MIN_REQUEST_BYTES = REQUEST_HEADER_PREFIX.size + 2
#: Kafka's ``socket.request.max.bytes`` default (100 MiB).
MAX_REQUEST_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    api_key: int
    api_version: int
    correlation_id: int


def parse_frame_size(size_bytes: bytes, max_bytes: int = MAX_REQUEST_BYTES) -> int:
    """Decode and bound-check the 4-byte size prefix; raises :class:`MalformedFrame`."""
    if len(size_bytes) != FRAME_SIZE.size:
        raise MalformedFrame(f"size prefix needs {FRAME_SIZE.size} bytes, got {len(size_bytes)}")
    (size,) = FRAME_SIZE.unpack(size_bytes)
    if size < MIN_REQUEST_BYTES:
        raise MalformedFrame(f"frame size {size} is below the minimum request size {MIN_REQUEST_BYTES}")
    if size > max_bytes:
        raise MalformedFrame(f"frame size {size} exceeds the limit of {max_bytes} bytes")
    return int(size)


def peek_request_prefix(frame: bytes) -> RequestPrefix:
    """Read api_key / api_version / correlation_id from a frame body (size prefix removed)."""
    if len(frame) < REQUEST_HEADER_PREFIX.size:
        raise MalformedFrame(f"request header truncated: {len(frame)} bytes")
    api_key, api_version, correlation_id = REQUEST_HEADER_PREFIX.unpack_from(frame)
    return RequestPrefix(api_key, api_version, correlation_id)


def frame_payload(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return FRAME_SIZE.pack(len(payload)) + payload
