"""The CommitLog record: RocketMQ's message layout, defined once.

Every record is big-endian, IPv4 hosts, MessageVersion V1 (V2 when the topic is longer than
127 bytes)::

    offset  size  field
    0       4     TOTALSIZE            whole record, this field included
    4       4     MAGICCODE            0xDAA320A7 (V1) / 0xDAA320AB (V2)
    8       4     BODYCRC              zlib.crc32(stored body) & CRC_MASK (31 bits)
    12      4     QUEUEID
    16      4     FLAG                 user int
    20      8     QUEUEOFFSET          index in the ConsumeQueue
    28      8     PHYSICALOFFSET       absolute CommitLog offset of this record
    36      4     SYSFLAG              MessageSysFlag bits (SYSFLAG_*)
    40      8     BORNTIMESTAMP        ms
    48      8     BORNHOST             IPv4 4 + port 4
    56      8     STORETIMESTAMP       ms
    64      8     STOREHOST            IPv4 4 + port 4
    72      4     RECONSUMETIMES
    76      8     PREPARED_TX_OFFSET
    84      4     BODYLEN              then BODYLEN bytes of body
    .       1/2   TOPICLEN             V1: 1 byte, V2: 2 bytes; then the UTF-8 topic
    .       2     PROPLEN              then the properties string (name\\x01value\\x02 ...)

A file ends with an 8-byte BLANK record ``[TOTALSIZE = bytes left in file][BLANK_MAGIC]``.

Everything here is a pure function on bytes: no files, clocks or logging. Built on these
constants: the record checker and ``decode_record`` (:mod:`store.format.record_check`), the
vectorised encoder (:mod:`store.format.batch_encode`) and decoder
(:mod:`store.format.batch_decode`); message ids and hosts are in :mod:`store.format.ids`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Final, NamedTuple

from store.config import StoreConfig
from store.errors import InvalidArgument, MessageTooLarge
from store.format.ids import ip4_bytes
from store.format.vocabulary import SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_MASK, SYSFLAG_COMPRESSION_ZLIB

# --- Fixed header ----------------------------------------------------------------------------

#: (name, struct code) of every fixed field in record order; offsets are derived from it.
_HEADER_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("total_size", "i"),  # TOTALSIZE: whole record length in bytes
    ("magic", "I"),  # MAGICCODE: MAGIC_V1 / MAGIC_V2
    ("body_crc", "I"),  # BODYCRC: crc32 of the stored body, masked to 31 bits
    ("queue_id", "i"),  # QUEUEID
    ("flag", "i"),  # FLAG: user-defined int
    ("queue_offset", "q"),  # QUEUEOFFSET: logical index in the ConsumeQueue
    ("physical_offset", "q"),  # PHYSICALOFFSET: absolute CommitLog offset of the record
    ("sys_flag", "i"),  # SYSFLAG: MessageSysFlag bits
    ("born_timestamp", "q"),  # BORNTIMESTAMP: ms since epoch at the producer
    ("born_ip", "4s"),  # BORNHOST: IPv4 address
    ("born_port", "i"),  # BORNHOST: port
    ("store_timestamp", "q"),  # STORETIMESTAMP: ms since epoch at the store
    ("store_ip", "4s"),  # STOREHOST: IPv4 address
    ("store_port", "i"),  # STOREHOST: port
    ("reconsume_times", "i"),  # RECONSUMETIMES
    ("prepared_tx_offset", "q"),  # PREPARED_TX_OFFSET
    ("body_len", "i"),  # BODYLEN: length of the stored (possibly compressed) body
)

#: The fixed part of a record, TOTALSIZE through BODYLEN.
RECORD_HEADER: Final = struct.Struct(">" + "".join(code for _, code in _HEADER_FIELDS))


def _field_positions() -> dict[str, int]:
    positions: dict[str, int] = {}
    pos = 0
    for name, code in _HEADER_FIELDS:
        positions[name] = pos
        pos += struct.calcsize(">" + code)
    return positions


_POS: Final = _field_positions()

TOTAL_SIZE_POS: Final = _POS["total_size"]  # 0
MAGIC_POS: Final = _POS["magic"]  # 4
BODY_CRC_POS: Final = _POS["body_crc"]  # 8
QUEUE_ID_POS: Final = _POS["queue_id"]  # 12
FLAG_POS: Final = _POS["flag"]  # 16
QUEUE_OFFSET_POS: Final = _POS["queue_offset"]  # 20
PHYSICAL_OFFSET_POS: Final = _POS["physical_offset"]  # 28
SYS_FLAG_POS: Final = _POS["sys_flag"]  # 36
BORN_TIMESTAMP_POS: Final = _POS["born_timestamp"]  # 40
BORN_HOST_POS: Final = _POS["born_ip"]  # 48
STORE_TIMESTAMP_POS: Final = _POS["store_timestamp"]  # 56
STORE_HOST_POS: Final = _POS["store_ip"]  # 64
RECONSUME_TIMES_POS: Final = _POS["reconsume_times"]  # 72
PREPARED_TX_OFFSET_POS: Final = _POS["prepared_tx_offset"]  # 76
BODY_LEN_POS: Final = _POS["body_len"]  # 84
BODY_POS: Final = RECORD_HEADER.size  # 88

#: Topic length prefix: 1 byte in V1, 2 bytes in V2.
TOPIC_LEN_V1: Final = struct.Struct(">B")
TOPIC_LEN_V2: Final = struct.Struct(">H")
#: Properties length prefix (Java short: at most 32767 bytes of properties).
PROPS_LEN: Final = struct.Struct(">H")
MAX_PROPERTIES_BYTES: Final = 0x7FFF
#: Longest topic a V1 record can carry; longer topics switch to V2 automatically.
MAX_TOPIC_BYTES_V1: Final = 127
MAX_TOPIC_BYTES_V2: Final = 0x7FFF

#: Bytes of a record besides body, topic and properties.
FIXED_OVERHEAD_V1: Final = BODY_POS + TOPIC_LEN_V1.size + PROPS_LEN.size  # 91
FIXED_OVERHEAD_V2: Final = BODY_POS + TOPIC_LEN_V2.size + PROPS_LEN.size  # 92

MAGIC_V1: Final = 0xDAA320A7  # -626843481 as a Java int
MAGIC_V2: Final = 0xDAA320AB  # -626843477
BLANK_MAGIC: Final = 0xCBD43194  # -875286124

#: End-of-file filler: TOTALSIZE (bytes left in the file) + BLANK_MAGIC.
BLANK_RECORD: Final = struct.Struct(">iI")
#: A record is appended only when ``size + END_OF_FILE_MIN_BLANK <= bytes left in the file``.
END_OF_FILE_MIN_BLANK: Final = BLANK_RECORD.size  # 8


class BodyPolicy(NamedTuple):
    """How bodies are admitted and stored (from ``StoreConfig``)."""

    max_body_bytes: int  # larger bodies raise MessageTooLarge
    compress_over_bytes: int  # larger bodies are stored zlib-compressed
    compress_level: int = 5

    @staticmethod
    def from_config(config: StoreConfig) -> BodyPolicy:
        return BodyPolicy(
            config.max_message_size_bytes, config.compress_body_over_bytes, config.compress_level
        )


class RecordFields(NamedTuple):
    """Everything :func:`encode_record` writes. ``body`` is the *stored* body (see
    :func:`prepare_body`); ``sys_flag`` must already carry its compression bits.

    A NamedTuple (immutable, and five times cheaper to build than a frozen dataclass: this
    is on the per-message put path)."""

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: Mapping[str, str] | None = None
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    store_timestamp_ms: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    physical_offset: int = 0


class RecordHeader(NamedTuple):
    """The fixed fields of one record, in layout order (see :data:`RECORD_HEADER`)."""

    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_ip: bytes
    born_port: int
    store_timestamp: int
    store_ip: bytes
    store_port: int
    reconsume_times: int
    prepared_tx_offset: int
    body_len: int


# --- Small helpers ---------------------------------------------------------------------------


#: BODYCRC keeps the low 31 bits of the CRC32 (RocketMQ ``UtilAll.crc32``: a positive Java int).
CRC_MASK: Final = 0x7FFFFFFF


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ ``UtilAll.crc32``: CRC32 masked to 31 bits."""
    return zlib.crc32(body) & CRC_MASK


def topic_length_prefix(topic_bytes: bytes) -> tuple[int, struct.Struct]:
    """(magic, length-prefix struct) for a topic: V1 up to 127 bytes, V2 beyond."""
    if len(topic_bytes) <= MAX_TOPIC_BYTES_V1:
        return MAGIC_V1, TOPIC_LEN_V1
    if len(topic_bytes) <= MAX_TOPIC_BYTES_V2:
        return MAGIC_V2, TOPIC_LEN_V2
    raise InvalidArgument(f"topic is {len(topic_bytes)} bytes, at most {MAX_TOPIC_BYTES_V2} allowed")


def record_size(body_len: int, topic_len: int, properties_len: int) -> int:
    """TOTALSIZE of a record with these (stored, encoded) lengths."""
    overhead = FIXED_OVERHEAD_V1 if topic_len <= MAX_TOPIC_BYTES_V1 else FIXED_OVERHEAD_V2
    return overhead + body_len + topic_len + properties_len


# --- Properties ------------------------------------------------------------------------------


def encode_properties(properties: Mapping[str, str] | None) -> bytes:
    """``messageProperties2String``: ``name\\x01value\\x02`` for every pair, in mapping order.

    Like RocketMQ a trailing ``\\x02`` follows every pair. Pairs whose value is empty are
    skipped (RocketMQ's decoder drops them anyway); names must be non-empty and neither names
    nor values may contain the separators. Raises InvalidArgument / MessageTooLarge (> 32767).
    """
    if not properties:
        return b""
    pairs = [(name, value) for name, value in properties.items() if value]
    text = "".join([f"{name}\x01{value}\x02" for name, value in pairs])
    # exactly one separator of each kind per pair, and no empty name
    empty_name = text.startswith("\x01") or "\x02\x01" in text
    if empty_name or text.count("\x01") != len(pairs) or text.count("\x02") != len(pairs):
        raise InvalidArgument(
            f"property names must be non-empty and names/values may not contain \\x01 or \\x02: {pairs!r}"
        )
    encoded = text.encode("utf-8")
    if len(encoded) > MAX_PROPERTIES_BYTES:
        raise MessageTooLarge(f"properties are {len(encoded)} bytes, at most {MAX_PROPERTIES_BYTES}")
    return encoded


def decode_properties(raw: bytes | bytearray | memoryview) -> dict[str, str]:
    """``string2messageProperties``: items without a name or a value are ignored."""
    result: dict[str, str] = {}
    for item in str(raw, "utf-8", "replace").split("\x02"):
        name, _, value = item.partition("\x01")
        if name and value:  # no separator leaves the value empty
            result[name] = value
    return result


# --- Bodies ----------------------------------------------------------------------------------


def prepare_body(body: bytes, policy: BodyPolicy) -> tuple[bytes, int]:
    """(stored body, sysFlag bits) for a producer body.

    Raises MessageTooLarge (naming the size) when ``len(body) > policy.max_body_bytes``.
    Bodies longer than ``compress_over_bytes`` are zlib-compressed (as RocketMQ 5 clients do)
    and flagged ``COMPRESSED | COMPRESSION_ZLIB``.
    """
    if len(body) > policy.max_body_bytes:
        raise MessageTooLarge(
            f"message body is {len(body)} bytes, larger than max_message_size_bytes={policy.max_body_bytes}"
        )
    if len(body) > policy.compress_over_bytes:
        return zlib.compress(body, policy.compress_level), SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_ZLIB
    return body, 0


def restore_body(stored: bytes, sys_flag: int) -> bytes:
    """Inverse of :func:`prepare_body` (only zlib is supported; type 0 means zlib, as in Java)."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return stored
    kind = sys_flag & SYSFLAG_COMPRESSION_MASK
    if kind not in (0, SYSFLAG_COMPRESSION_ZLIB):
        raise InvalidArgument(f"unsupported compression type 0x{kind:x}")
    return zlib.decompress(stored)


# --- Records ---------------------------------------------------------------------------------


def encode_record(rec: RecordFields) -> bytes:
    """Encode one record exactly as RocketMQ lays it out (see the module docstring)."""
    topic_bytes = rec.topic.encode("utf-8")
    magic, topic_len = topic_length_prefix(topic_bytes)
    props = encode_properties(rec.properties)
    size = record_size(len(rec.body), len(topic_bytes), len(props))
    try:
        header = RECORD_HEADER.pack(
            size,
            magic,
            body_crc(rec.body),
            rec.queue_id,
            rec.flag,
            rec.queue_offset,
            rec.physical_offset,
            rec.sys_flag,
            rec.born_timestamp_ms,
            ip4_bytes(rec.born_host[0]),
            rec.born_host[1],
            rec.store_timestamp_ms,
            ip4_bytes(rec.store_host[0]),
            rec.store_host[1],
            rec.reconsume_times,
            rec.prepared_transaction_offset,
            len(rec.body),
        )
    except struct.error as exc:
        raise InvalidArgument(f"a record field is out of range for its Java type: {exc}") from exc
    return b"".join(
        (header, rec.body, topic_len.pack(len(topic_bytes)), topic_bytes, PROPS_LEN.pack(len(props)), props)
    )


def encode_blank(remaining: int) -> bytes:
    """The 8-byte end-of-file record filling ``remaining`` bytes."""
    return BLANK_RECORD.pack(remaining, BLANK_MAGIC)
