"""RocketMQ remoting frames and the ``RemotingCommand`` value, both header encodings.

Frame (``RemotingCommand.encode`` / ``decode``), big-endian::

    +------------+------------------------------------+----------------+--------+
    | length i32 | (serializeType << 24) | headerLen  | header         | body   |
    +------------+------------------------------------+----------------+--------+
      length = 4 + headerLen + len(body) (it does not count itself)

``serializeType`` 0 = JSON, 1 = ROCKETMQ (binary). JSON header (fastjson on the Java side,
``JSON.stringify`` in ali-ons)::

    {"code":310,"extFields":{"a":"PG",...},"flag":0,"language":"JAVA","opaque":7,
     "remark":null,"serializeTypeCurrentRPC":"JSON","version":121}

``language`` is a :class:`~ingest_api.remoting.codes.LanguageCode` *name*. ali-ons sends
``extFields`` values as JSON numbers and booleans, not strings: they are read as Java's
``HashMap<String, String>`` would hold them (``7`` -> ``"7"``, ``true`` -> ``"true"``).

ROCKETMQ binary header (``RocketMQSerializable.rocketMQProtocolEncode``)::

    offset  size  field
    0       2     code          int16
    2       1     language      LanguageCode number
    3       2     version       int16
    5       4     opaque        int32
    9       4     flag          int32 (bit 0 response, bit 1 one-way)
    13      4     remarkLen     then remarkLen bytes of UTF-8 (0 = no remark)
    .       4     extLen        then extLen bytes of entries:
                                  int16 keyLen, key UTF-8, int32 valLen, value UTF-8

Pure functions on bytes; every decoding fault is a :class:`MalformedFrame` naming what was
wrong, every oversized frame a :class:`FrameTooLarge`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import msgspec

from ingest_api.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE, LanguageCode, SerializeType
from ingest_api.remoting.errors import FrameTooLarge, MalformedFrame, RemotingProtocolError

#: The length prefix (bytes that follow it).
FRAME_LENGTH: Final = struct.Struct(">i")
#: The word after the length: serialize type in the top byte, header length in the low 24 bits.
HEADER_WORD: Final = struct.Struct(">i")
HEADER_LENGTH_MASK: Final = 0x00FFFFFF
SERIALIZE_TYPE_SHIFT: Final = 24
#: Smallest legal ``length``: the header word alone.
MIN_FRAME_LENGTH: Final = HEADER_WORD.size
#: Default cap on ``length`` (16 MiB; RocketMQ's ``maxFrameLength`` default is 16 MiB too).
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024

#: Binary header: code i16, language i8, version i16, opaque i32, flag i32.
BINARY_FIXED: Final = struct.Struct(">hbhii")
#: A 4-byte length (remark, extFields block, an extFields value).
BINARY_INT_LEN: Final = struct.Struct(">i")
#: A 2-byte length (an extFields key).
BINARY_SHORT_LEN: Final = struct.Struct(">h")

#: A JSON header's numbers are Java ints.
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), lt=2**31)]
#: The length prefix and the header word together (one pack per encoded frame).
FRAME_HEAD: Final = struct.Struct(">ii")

#: The order fastjson writes a ``RemotingCommand`` in (alphabetical); nulls are left out.
_JSON_SERIALIZE_NAME: Final = {SerializeType.JSON: "JSON", SerializeType.ROCKETMQ: "ROCKETMQ"}
#: The serialize types by their number (an enum call per frame costs more than a lookup).
_SERIALIZE_TYPES: Final = {int(kind): kind for kind in SerializeType}
#: Known language numbers -> names, for the JSON header's ``language``.
_LANGUAGE_NAMES: Final = {int(code): code.name for code in LanguageCode}
#: msgspec's JSON reader and writer: the same documents as :mod:`json` (``ensure_ascii=False``,
#: no spaces), at a third of the cost; they are the door's hottest code after the store.
_JSON_DECODER: Final = msgspec.json.Decoder()
_JSON_ENCODER: Final = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` holds the custom header (all strings);
    ``serialize_type`` is the header encoding it arrived in (a response must use the
    request's). ``language`` is a :class:`LanguageCode` value (unknown names read as OTHER)."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: int = LanguageCode.JAVA
    version: int = 0
    remark: str | None = None
    ext_fields: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


def request(
    code: int,
    opaque: int,
    ext_fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    *,
    oneway: bool = False,
    serialize_type: SerializeType = SerializeType.JSON,
    remark: str | None = None,
) -> RemotingCommand:
    """A request command (server -> client requests such as CHECK_TRANSACTION_STATE, tests)."""
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=FLAG_ONEWAY if oneway else 0,
        remark=remark,
        ext_fields=dict(ext_fields or {}),
        body=body,
        serialize_type=serialize_type,
    )


def response_to(
    req: RemotingCommand,
    code: int,
    remark: str | None = None,
    ext_fields: Mapping[str, str] | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """The response to ``req``: its ``opaque`` echoed, the response bit set, its encoding kept."""
    return RemotingCommand(
        code=code,
        opaque=req.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        ext_fields=dict(ext_fields or {}),
        body=body,
        serialize_type=req.serialize_type,
    )


# --- frames ----------------------------------------------------------------------------------------


def parse_frame_length(prefix: bytes, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> int:
    """The ``length`` of a frame from its 4-byte prefix: the bytes still to read.

    Raises :class:`FrameTooLarge` above ``max_frame_bytes`` and :class:`MalformedFrame` below
    :data:`MIN_FRAME_LENGTH` (a negative length included).
    """
    if len(prefix) != FRAME_LENGTH.size:
        raise MalformedFrame(f"frame length prefix needs {FRAME_LENGTH.size} bytes, got {len(prefix)}")
    (length,) = FRAME_LENGTH.unpack(prefix)
    if length > max_frame_bytes:
        raise FrameTooLarge(f"frame length {length} exceeds the limit of {max_frame_bytes} bytes")
    if length < MIN_FRAME_LENGTH:
        raise MalformedFrame(f"frame length {length} is below the minimum of {MIN_FRAME_LENGTH}")
    return int(length)


def take_frames(pending: bytearray, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> list[bytes]:
    """Cut every whole frame off the front of ``pending`` (bytes read from a stream) and return
    them without their length prefix, in order; an unfinished frame stays in ``pending``.

    Raises :class:`FrameTooLarge` / :class:`MalformedFrame` (as :func:`parse_frame_length`)
    for the first bad length; the frames before it are cut off and lost with the error.
    """
    frames: list[bytes] = []
    at, end = 0, len(pending)
    while end - at >= FRAME_LENGTH.size:
        (length,) = FRAME_LENGTH.unpack_from(pending, at)
        if not MIN_FRAME_LENGTH <= length <= max_frame_bytes:
            del pending[:at]
            parse_frame_length(bytes(pending[: FRAME_LENGTH.size]), max_frame_bytes)  # raises
        start = at + FRAME_LENGTH.size
        if end - start < length:
            break
        frames.append(bytes(pending[start : start + length]))
        at = start + length
    del pending[:at]
    return frames


def frame_shortfall(pending: bytes | bytearray) -> int:
    """How many bytes the unfinished frame at the front of ``pending`` still lacks (a stream that
    ended there was truncated); 0 for an empty ``pending``."""
    if not pending:
        return 0
    if len(pending) < FRAME_LENGTH.size:
        return FRAME_LENGTH.size - len(pending)
    (length,) = FRAME_LENGTH.unpack_from(pending)
    return max(0, FRAME_LENGTH.size + int(length) - len(pending))


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode the ``length`` bytes after the prefix (header word, header, body)."""
    data = frame if type(frame) is bytes else bytes(frame)
    if len(data) < HEADER_WORD.size:
        raise MalformedFrame(f"frame of {len(data)} bytes has no header-length word")
    (word,) = HEADER_WORD.unpack_from(data)
    header_length = word & HEADER_LENGTH_MASK
    raw_type = (word >> SERIALIZE_TYPE_SHIFT) & 0xFF
    if header_length > len(data) - HEADER_WORD.size:
        raise MalformedFrame(
            f"header length {header_length} exceeds the frame's {len(data) - HEADER_WORD.size} bytes"
        )
    kind = _SERIALIZE_TYPES.get(raw_type)
    if kind is None:
        raise MalformedFrame(f"unknown serialize type {raw_type} (0 = JSON, 1 = ROCKETMQ)")
    header = data[HEADER_WORD.size : HEADER_WORD.size + header_length]
    body = data[HEADER_WORD.size + header_length :]
    if kind is SerializeType.JSON:
        strict = _strict_json_header(header)
        if strict is not None:
            return RemotingCommand(
                strict.code,
                strict.opaque,
                strict.flag,
                _json_language(strict.language),
                strict.version,
                strict.remark,
                strict.extFields,
                body,
                kind,
            )
        fields = decode_json_header(header)
    else:
        fields = decode_binary_header(header)
    return RemotingCommand(**fields, body=body, serialize_type=kind)


def encode_command(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included, with ``cmd.serialize_type``'s header."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = encode_binary_header(cmd)
    else:
        header = encode_json_header(cmd)
    if len(header) > HEADER_LENGTH_MASK:
        raise RemotingProtocolError(f"header of {len(header)} bytes does not fit 24 bits")
    word = (int(cmd.serialize_type) << SERIALIZE_TYPE_SHIFT) | len(header)
    length = HEADER_WORD.size + len(header) + len(cmd.body)
    return b"".join((FRAME_HEAD.pack(length, word), header, cmd.body))


# --- JSON header -----------------------------------------------------------------------------------


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """fastjson's layout: keys in alphabetical order, no nulls, UTF-8 unescaped."""
    doc: dict[str, Any] = {"code": cmd.code}
    ext = cmd.ext_fields
    if ext:
        doc["extFields"] = ext if type(ext) is dict else dict(ext)
    doc["flag"] = cmd.flag
    doc["language"] = _language_name(cmd.language)
    doc["opaque"] = cmd.opaque
    if cmd.remark is not None:
        doc["remark"] = cmd.remark
    doc["serializeTypeCurrentRPC"] = _JSON_SERIALIZE_NAME[SerializeType.JSON]
    doc["version"] = cmd.version
    return _JSON_ENCODER.encode(doc)


class _StrictJsonHeader(msgspec.Struct):
    """A JSON header as Java clients write it: int32 numbers, a language name, text extFields.
    Other keys (``serializeTypeCurrentRPC``) are ignored."""

    code: Int32
    opaque: Int32 = 0
    flag: Int32 = 0
    version: Int32 = 0
    language: str = LanguageCode.JAVA.name
    remark: str | None = None
    extFields: dict[str, str] = msgspec.field(default_factory=dict)  # noqa: N815 (the wire name)


_STRICT_JSON_DECODER: Final = msgspec.json.Decoder(_StrictJsonHeader)


def _strict_json_header(header: bytes) -> _StrictJsonHeader | None:
    """The header in one typed pass when it has the strict shape, else None: then
    :func:`decode_json_header` reads what Java would (nulls, ali-ons' numbers in extFields)
    or names what is wrong. Both read a strict header alike (tests/remoting/test_codec.py)."""
    try:
        return _STRICT_JSON_DECODER.decode(header)
    except (UnicodeDecodeError, msgspec.DecodeError):  # ValidationError is a DecodeError
        return None


def decode_json_header(header: bytes) -> dict[str, Any]:
    """The command fields of a JSON header (``code`` required, the rest default like Java's)."""
    try:
        doc = _JSON_DECODER.decode(header)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        raise MalformedFrame(f"JSON header does not parse: {exc} (first bytes {header[:40]!r})") from exc
    if not isinstance(doc, dict):
        raise MalformedFrame(f"JSON header must be an object, got {type(doc).__name__}")
    if "code" not in doc:
        raise MalformedFrame("JSON header has no 'code'")
    remark = doc.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise MalformedFrame(f"JSON header 'remark' must be a string, got {remark!r}")
    return {
        "code": _json_int(doc, "code"),
        "opaque": _json_int(doc, "opaque"),
        "flag": _json_int(doc, "flag"),
        "version": _json_int(doc, "version"),
        "language": _json_language(doc.get("language")),
        "remark": remark,
        "ext_fields": _json_ext_fields(doc.get("extFields")),
    }


def _json_int(doc: Mapping[str, Any], name: str) -> int:
    value = doc.get(name, 0)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedFrame(f"JSON header {name!r} must be an integer, got {value!r}")
    if not -(2**31) <= value < 2**31:
        raise MalformedFrame(f"JSON header {name!r} = {value} does not fit an int32")
    return value


def _json_language(value: object) -> int:
    if value is None:
        return LanguageCode.JAVA
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        member = LanguageCode.__members__.get(value)
        return LanguageCode.OTHER if member is None else member
    raise MalformedFrame(f"JSON header 'language' must be a name, got {value!r}")


def _json_ext_fields(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedFrame(f"JSON header 'extFields' must be an object, got {type(value).__name__}")
    if all(type(item) is str for item in value.values()):
        return value  # a fresh dict of the decoder's: the common case (Java clients) as it came
    fields: dict[str, str] = {}
    for key, item in value.items():
        if item is None:
            continue  # Java's HashMap.get returns null: as if absent
        if isinstance(item, bool):
            fields[key] = "true" if item else "false"
        elif isinstance(item, str | int | float):
            fields[key] = str(item)
        else:
            raise MalformedFrame(f"JSON header extFields[{key!r}] must be a scalar, got {item!r}")
    return fields


def _language_value(number: int) -> int:
    """A known language as its :class:`LanguageCode`, an unknown number as it came."""
    try:
        return LanguageCode(number)
    except ValueError:
        return number


def _language_name(language: int) -> str:
    return _LANGUAGE_NAMES.get(language, LanguageCode.OTHER.name)


# --- ROCKETMQ binary header -------------------------------------------------------------------------


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """``rocketMQProtocolEncode``; raises :class:`RemotingProtocolError` for a code, version
    or language that does not fit its field (Java would silently truncate)."""
    for what, number, low, high in (
        ("code", cmd.code, -(2**15), 2**15),
        ("version", cmd.version, -(2**15), 2**15),
        ("language", cmd.language, -(2**7), 2**7),
    ):
        if not low <= number < high:
            raise RemotingProtocolError(f"binary header {what} {number} does not fit its field")
    parts = [BINARY_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)]
    remark = (cmd.remark or "").encode("utf-8")
    parts += [BINARY_INT_LEN.pack(len(remark)), remark]
    entries = bytearray()
    for key, value in cmd.ext_fields.items():
        key_bytes, value_bytes = key.encode("utf-8"), value.encode("utf-8")
        entries += BINARY_SHORT_LEN.pack(len(key_bytes)) + key_bytes
        entries += BINARY_INT_LEN.pack(len(value_bytes)) + value_bytes
    parts += [BINARY_INT_LEN.pack(len(entries)), bytes(entries)]
    return b"".join(parts)


def decode_binary_header(header: bytes) -> dict[str, Any]:
    """``rocketMQProtocolDecode``: every length is checked against the header's end.

    A zero-length remark is None; an entry with an empty key or value is dropped (Java stores
    null, which a header lookup treats as absent).
    """
    if len(header) < BINARY_FIXED.size:
        raise MalformedFrame(f"binary header of {len(header)} bytes is shorter than {BINARY_FIXED.size}")
    code, language, version, opaque, flag = BINARY_FIXED.unpack_from(header)
    pos = BINARY_FIXED.size
    remark_bytes, pos = _read_sized(header, pos, BINARY_INT_LEN, "remark")
    ext_bytes, pos = _read_sized(header, pos, BINARY_INT_LEN, "extFields")
    ext_fields: dict[str, str] = {}
    at = 0
    while at < len(ext_bytes):
        key, at = _read_sized(ext_bytes, at, BINARY_SHORT_LEN, "extFields key")
        value, at = _read_sized(ext_bytes, at, BINARY_INT_LEN, f"extFields value of {key[:40]!r}")
        if key and value:
            ext_fields[_utf8(key, "extFields key")] = _utf8(value, "extFields value")
    return {
        "code": code,
        "opaque": opaque,
        "flag": flag,
        "version": version,
        "language": _language_value(language),
        "remark": _utf8(remark_bytes, "remark") if remark_bytes else None,
        "ext_fields": ext_fields,
    }


def _read_sized(data: bytes, pos: int, prefix: struct.Struct, what: str) -> tuple[bytes, int]:
    if pos + prefix.size > len(data):
        raise MalformedFrame(f"binary header truncated: no room for the length of {what} at byte {pos}")
    (size,) = prefix.unpack_from(data, pos)
    start = pos + prefix.size
    if size < 0 or start + size > len(data):
        raise MalformedFrame(
            f"binary header: {what} length {size} at byte {pos} overruns the {len(data)} bytes"
        )
    return data[start : start + size], start + size


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFrame(f"binary header: {what} is not UTF-8: {exc}") from exc
