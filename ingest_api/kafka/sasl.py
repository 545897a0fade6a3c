"""Kafka SASL frames: SaslHandshake (17) v0-1, SaslAuthenticate (36) v0-2, and v0's raw tokens.

Pure codecs (no I/O), declared here rather than through kafka-python's classes (as
:mod:`ingest_api.kafka.codec` does for the other APIs) because these frames arrive *before*
authentication: they are parsed with explicit bounds, every error is one
:class:`MalformedFrame`, and the token bytes never reach an exception text or a ``repr``.
tests/kafka/test_sasl_codec.py holds golden bytes and a differential test against
kafka-python's classes. Frames are given and returned without / with the int32 size prefix,
as :mod:`ingest_api.kafka.framing` does.

Requests (header v1 = api_key i16, api_version i16, correlation_id i32, client_id
nullable string i16; header v2 = header v1 + tagged fields)::

    SaslHandshake v0-1      header v1 | mechanism string(i16)
    SaslAuthenticate v0-1   header v1 | auth_bytes bytes(i32)
    SaslAuthenticate v2     header v2 | auth_bytes compact bytes(uvarint n+1) | tagged fields

Responses (header v0 = correlation_id i32; header v1 = header v0 + tagged fields)::

    SaslHandshake v0-1      header v0 | error_code i16 | mechanisms [string(i16)] (i32 count)
    SaslAuthenticate v0     header v0 | error_code i16 | error_message nullable string(i16)
                                      | auth_bytes bytes(i32)
    SaslAuthenticate v1     ... v0 ...                 | session_lifetime_ms i64
    SaslAuthenticate v2     header v1 | error_code i16 | error_message compact nullable string
                                      | auth_bytes compact bytes | session_lifetime_ms i64
                                      | tagged fields

After SaslHandshake **v0**, tokens travel bare in both directions: ``size i32 | token``
(:func:`encode_raw_token`; a received frame *is* the token). Tagged fields are read and
skipped on requests and always written empty (``0x00``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ingest_api.kafka.errors import MalformedFrame
from ingest_api.kafka.framing import FRAME_SIZE

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: api key -> (min version, max version): advertise these only on SASL listeners.
SASL_VERSIONS = {SASL_HANDSHAKE: (0, 1), SASL_AUTHENTICATE: (0, 2)}
#: SaslAuthenticate's first flexible version (KIP-482).
AUTHENTICATE_FLEXIBLE_SINCE = 2
#: Largest frame accepted before authentication (PLAIN and SCRAM need under 1 KiB); Kafka's
#: own cap (``sasl.server.max.receive.size``) is 512 KiB.
MAX_PRE_AUTH_FRAME_BYTES = 64 * 1024

#: api_key, api_version, correlation_id, client_id length (request header v1/v2 fixed part).
REQUEST_HEADER_V1 = struct.Struct(">hhih")
#: Response header v0: correlation_id.
RESPONSE_HEADER_V0 = struct.Struct(">i")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
#: The empty tagged-field section.
NO_TAGGED_FIELDS = b"\x00"


@dataclass(frozen=True, slots=True)
class SaslHandshakeRequest:
    api_version: int
    correlation_id: int
    client_id: str | None
    mechanism: str


@dataclass(frozen=True, slots=True)
class SaslAuthenticateRequest:
    """``auth_bytes`` is a credential (a PLAIN password, a SCRAM proof): never shown."""

    api_version: int
    correlation_id: int
    client_id: str | None
    auth_bytes: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    api_version: int
    correlation_id: int
    error_code: int
    error_message: str | None
    auth_bytes: bytes = field(repr=False)
    session_lifetime_ms: int = 0


class _Reader:
    """Bounds-checked reads over a frame; every overrun is a :class:`MalformedFrame`."""

    def __init__(self, frame: bytes, what: str) -> None:
        self.frame, self.pos, self.what = frame, 0, what

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.frame):
            raise MalformedFrame(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.frame[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        return layout.unpack(self.take(layout.size))

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            (byte,) = self.take(1)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise MalformedFrame(f"{self.what}: unsigned varint longer than 5 bytes")

    def text(self, size: int) -> str:
        raw = self.take(size)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        raise MalformedFrame(f"{self.what}: string is not UTF-8")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.frame):
            raise MalformedFrame(f"{self.what}: {len(self.frame) - self.pos} trailing bytes")


def _request_header(
    frame: bytes, api_key: int, versions: tuple[int, int], what: str
) -> tuple[_Reader, int, int, str | None]:
    reader = _Reader(frame, what)
    key, version, correlation_id, client_id_size = reader.unpack(REQUEST_HEADER_V1)
    if key != api_key or not versions[0] <= version <= versions[1]:
        raise MalformedFrame(f"{what}: api_key {key} version {version} is not this API")
    client_id = None if client_id_size == -1 else reader.text(client_id_size)
    return reader, version, correlation_id, client_id


def decode_sasl_handshake_request(frame: bytes) -> SaslHandshakeRequest:
    """Decode a SaslHandshake request (size prefix removed); raises :class:`MalformedFrame`."""
    what = "SaslHandshake request"
    reader, version, correlation_id, client_id = _request_header(
        frame, SASL_HANDSHAKE, SASL_VERSIONS[SASL_HANDSHAKE], what
    )
    (size,) = reader.unpack(INT16)
    mechanism = reader.text(size)
    reader.end()
    return SaslHandshakeRequest(version, correlation_id, client_id, mechanism)


def decode_sasl_authenticate_request(frame: bytes) -> SaslAuthenticateRequest:
    """Decode a SaslAuthenticate request (size prefix removed); raises :class:`MalformedFrame`."""
    what = "SaslAuthenticate request"
    reader, version, correlation_id, client_id = _request_header(
        frame, SASL_AUTHENTICATE, SASL_VERSIONS[SASL_AUTHENTICATE], what
    )
    if version >= AUTHENTICATE_FLEXIBLE_SINCE:
        reader.skip_tagged_fields()  # request header v2
        size = reader.uvarint() - 1
        auth_bytes = reader.take(size)
        reader.skip_tagged_fields()
    else:
        (size,) = reader.unpack(INT32)
        auth_bytes = reader.take(size)
    reader.end()
    return SaslAuthenticateRequest(version, correlation_id, client_id, auth_bytes)


def encode_sasl_handshake_response(correlation_id: int, error_code: int, mechanisms: list[str]) -> bytes:
    """Framed SaslHandshake response (same layout for v0 and v1)."""
    parts = [RESPONSE_HEADER_V0.pack(correlation_id), INT16.pack(error_code), INT32.pack(len(mechanisms))]
    parts += [_string(name) for name in mechanisms]
    return _framed(b"".join(parts))


def encode_sasl_authenticate_response(response: SaslAuthenticateResponse) -> bytes:
    """Framed SaslAuthenticate response of ``response.api_version`` (0-2)."""
    version = response.api_version
    if not SASL_VERSIONS[SASL_AUTHENTICATE][0] <= version <= SASL_VERSIONS[SASL_AUTHENTICATE][1]:
        raise ValueError(f"SaslAuthenticate v{version} is not supported")
    parts = [RESPONSE_HEADER_V0.pack(response.correlation_id)]
    if version >= AUTHENTICATE_FLEXIBLE_SINCE:
        message = response.error_message
        parts += [
            NO_TAGGED_FIELDS,  # response header v1
            INT16.pack(response.error_code),
            uvarint(0) if message is None else _compact(message.encode("utf-8")),
            _compact(response.auth_bytes),
            INT64.pack(response.session_lifetime_ms),
            NO_TAGGED_FIELDS,
        ]
    else:
        message = response.error_message
        parts += [
            INT16.pack(response.error_code),
            INT16.pack(-1) if message is None else _string(message),
            INT32.pack(len(response.auth_bytes)),
            response.auth_bytes,
        ]
        if version >= 1:
            parts.append(INT64.pack(response.session_lifetime_ms))
    return _framed(b"".join(parts))


def encode_raw_token(token: bytes) -> bytes:
    """A SaslHandshake-v0 token: ``size i32 | token`` (no header, in both directions)."""
    return _framed(token)


def uvarint(value: int) -> bytes:
    """Unsigned LEB128 (Kafka's UNSIGNED_VARINT)."""
    if value < 0:
        raise ValueError("an unsigned varint cannot be negative")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return INT16.pack(len(raw)) + raw


def _compact(raw: bytes) -> bytes:
    return uvarint(len(raw) + 1) + raw


def _framed(payload: bytes) -> bytes:
    return FRAME_SIZE.pack(len(payload)) + payload
