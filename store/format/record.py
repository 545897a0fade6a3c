"""The CommitLog record: RocketMQ's message layout, defined once.

Every record is big-endian, IPv4 hosts, MessageVersion V1 (V2 when the topic is longer than
127 bytes)::

    offset  size  field
    0       4     TOTALSIZE            whole record, this field included
    4       4     MAGICCODE            0xDAA320A7 (V1) / 0xDAA320AB (V2)
    8       4     BODYCRC              zlib.crc32(stored body) & 0x7FFFFFFF
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

Everything here is a pure function on bytes: no files, clocks or logging. The record layout
of a whole batch (vectorised) lives in :mod:`store.format.batch_encode`, built on these constants.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import ipaddress
import socket
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from store.config import StoreConfig
from store.errors import CorruptStore, InvalidArgument, MessageTooLarge
from store.format.vocabulary import SYSFLAG_COMPRESSED, SYSFLAG_COMPRESSION_MASK, SYSFLAG_COMPRESSION_ZLIB
from store.types import MessageView

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

# --- Message ids -----------------------------------------------------------------------------
#: offsetMsgId: store IPv4 (4) + store port (4) + CommitLog offset (8), as 32 upper-case hex.
MSG_ID: Final = struct.Struct(">4siq")
MSG_ID_HEX_LEN: Final = 2 * MSG_ID.size  # 32


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


class RecordStatus(enum.Enum):
    """What :func:`check_record` found at a position."""

    OK = "ok"  # a complete, consistent record
    BLANK = "blank"  # end-of-file filler: continue in the next file
    END = "end"  # zero bytes: nothing was ever written here
    CORRUPT = "corrupt"  # anything else; ``reason`` says what


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


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """Outcome of :func:`check_record`; ``header``/``topic``/``properties`` set when OK."""

    status: RecordStatus
    size: int
    reason: str = ""
    header: RecordHeader | None = None
    topic: str = ""
    properties: dict[str, str] | None = None


# --- Small helpers ---------------------------------------------------------------------------


def body_crc(body: bytes | memoryview) -> int:
    """RocketMQ ``UtilAll.crc32``: CRC32 masked to 31 bits."""
    return zlib.crc32(body) & 0x7FFFFFFF


@functools.lru_cache(maxsize=1024)
def ip4_bytes(host: str) -> bytes:
    """IPv4 address -> 4 bytes. IPv4-mapped IPv6 (``::ffff:a.b.c.d``) is accepted; any other
    host raises InvalidArgument (records carry IPv4 hosts only: no BORNHOST_V6 layout)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise InvalidArgument(f"not an IP address: {host!r}") from exc
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            raise InvalidArgument(f"IPv6 host {host!r} cannot be stored (IPv4 records only)")
        address = address.ipv4_mapped
    return address.packed


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


def check_record(buf: bytes | bytearray | memoryview, pos: int, check_crc: bool) -> RecordCheck:
    """``checkMessageAndReturnSize``: validate the record at ``buf[pos:]``.

    Never raises on bad data: returns CORRUPT with a reason (bad magic, impossible size,
    record past the end of the buffer, inconsistent lengths, body CRC mismatch).
    """
    limit = len(buf)
    if pos + BLANK_RECORD.size > limit:
        return RecordCheck(RecordStatus.END, 0, "end of buffer")
    size, magic = BLANK_RECORD.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return RecordCheck(RecordStatus.BLANK, size)
    if size == 0 and magic == 0:
        return RecordCheck(RecordStatus.END, 0, "zero bytes (end of data)")
    if magic not in (MAGIC_V1, MAGIC_V2):
        return RecordCheck(RecordStatus.CORRUPT, 0, f"bad magic code 0x{magic:08x}")
    overhead = FIXED_OVERHEAD_V1 if magic == MAGIC_V1 else FIXED_OVERHEAD_V2
    if size < overhead:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"impossible total size {size}")
    if pos + size > limit:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"record of {size} bytes runs past the end")
    header = RecordHeader._make(RECORD_HEADER.unpack_from(buf, pos))
    body_start = pos + BODY_POS
    topic_len_pos = body_start + header.body_len
    if header.body_len < 0 or topic_len_pos + overhead - BODY_POS > pos + size:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"body length {header.body_len} exceeds the record")
    topic_prefix = TOPIC_LEN_V1 if magic == MAGIC_V1 else TOPIC_LEN_V2
    (topic_len,) = topic_prefix.unpack_from(buf, topic_len_pos)
    props_len_pos = topic_len_pos + topic_prefix.size + topic_len
    if props_len_pos + PROPS_LEN.size > pos + size:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"topic length {topic_len} exceeds the record")
    (props_len,) = PROPS_LEN.unpack_from(buf, props_len_pos)
    if props_len_pos + PROPS_LEN.size + props_len != pos + size:
        return RecordCheck(RecordStatus.CORRUPT, 0, f"lengths do not add up to total size {size}")
    if check_crc and body_crc(memoryview(buf)[body_start:topic_len_pos]) != header.body_crc:
        return RecordCheck(RecordStatus.CORRUPT, 0, "body CRC mismatch")
    topic_start = topic_len_pos + topic_prefix.size
    try:
        topic = bytes(buf[topic_start : topic_start + topic_len]).decode("utf-8")
    except UnicodeDecodeError:
        return RecordCheck(RecordStatus.CORRUPT, 0, "topic is not UTF-8")
    props_start = props_len_pos + PROPS_LEN.size
    properties = decode_properties(buf[props_start : props_start + props_len])
    return RecordCheck(RecordStatus.OK, size, "", header, topic, properties)


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0, check_crc: bool = False) -> MessageView:
    """Decode the record at ``buf[pos:]`` (body decompressed). Raises CorruptStore on bad data."""
    check = check_record(buf, pos, check_crc)
    if check.status is not RecordStatus.OK or check.header is None or check.properties is None:
        raise CorruptStore(f"no valid record at position {pos}: {check.status.value} {check.reason}")
    h = check.header
    stored = bytes(buf[pos + BODY_POS : pos + BODY_POS + h.body_len])
    store_host = (socket.inet_ntoa(h.store_ip), h.store_port)
    return MessageView(
        topic=check.topic,
        queue_id=h.queue_id,
        queue_offset=h.queue_offset,
        commitlog_offset=h.physical_offset,
        size_bytes=h.total_size,
        msg_id=encode_msg_id(store_host, h.physical_offset),
        body=restore_body(stored, h.sys_flag),
        flag=h.flag,
        sys_flag=h.sys_flag,
        born_timestamp_ms=h.born_timestamp,
        born_host=(socket.inet_ntoa(h.born_ip), h.born_port),
        store_timestamp_ms=h.store_timestamp,
        store_host=store_host,
        reconsume_times=h.reconsume_times,
        prepared_transaction_offset=h.prepared_tx_offset,
        properties=check.properties,
        body_crc=h.body_crc,
    )


# --- offsetMsgId -----------------------------------------------------------------------------


def encode_msg_id(store_host: tuple[str, int], commitlog_offset: int) -> str:
    """offsetMsgId: upper-case hex of store IPv4 + port + CommitLog offset (32 chars)."""
    return MSG_ID.pack(ip4_bytes(store_host[0]), store_host[1], commitlog_offset).hex().upper()


def decode_msg_id(msg_id: str) -> tuple[tuple[str, int], int]:
    """((store ip, port), CommitLog offset) of an offsetMsgId; InvalidArgument if malformed."""
    if len(msg_id) != MSG_ID_HEX_LEN:
        raise InvalidArgument(f"msg id must be {MSG_ID_HEX_LEN} hex chars, got {len(msg_id)}")
    try:
        ip, port, offset = MSG_ID.unpack(bytes.fromhex(msg_id))
    except ValueError as exc:
        raise InvalidArgument(f"msg id is not hex: {msg_id!r}") from exc
    return (socket.inet_ntoa(ip), port), offset


# --- UNIQ_KEY (MessageClientIDSetter) --------------------------------------------------------
#: UNIQ_KEY bytes: fixed prefix (IPv4 4 + pid 2 + class-loader hash 4) + ms since the start
#: of the month (4, wraps like Java's int cast) + counter (2); 32 upper-case hex chars.
UNIQ_KEY_PREFIX: Final = struct.Struct(">4sHI")
UNIQ_KEY_SUFFIX: Final = struct.Struct(">IH")
UNIQ_KEY_HEX_LEN: Final = 2 * (UNIQ_KEY_PREFIX.size + UNIQ_KEY_SUFFIX.size)  # 32
UNIQ_COUNTER_SPAN: Final = 1 << 16


def uniq_key_prefix(ip: str, pid: int, loader_hash: int) -> str:
    """The 20 fixed hex chars of every UNIQ_KEY a generator produces."""
    return UNIQ_KEY_PREFIX.pack(ip4_bytes(ip), pid & 0xFFFF, loader_hash & 0xFFFFFFFF).hex().upper()


def month_start_ms(epoch_ms: int) -> int:
    """Start (UTC) of the month containing ``epoch_ms``; RocketMQ uses the local calendar."""
    now = dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return int(start.timestamp() * 1000)


def encode_uniq_key(prefix: str, ms_since_month: int, counter: int) -> str:
    """One UNIQ_KEY from its prefix (see :func:`uniq_key_prefix`), time diff and counter."""
    return prefix + UNIQ_KEY_SUFFIX.pack(ms_since_month & 0xFFFFFFFF, counter & 0xFFFF).hex().upper()


def decode_uniq_key(uniq_key: str) -> tuple[str, int, int, int, int]:
    """(ip, pid, loader hash, ms since month start, counter) of a UNIQ_KEY."""
    if len(uniq_key) != UNIQ_KEY_HEX_LEN:
        raise InvalidArgument(f"UNIQ_KEY must be {UNIQ_KEY_HEX_LEN} hex chars, got {len(uniq_key)}")
    raw = bytes.fromhex(uniq_key)
    ip, pid, loader = UNIQ_KEY_PREFIX.unpack_from(raw, 0)
    diff, counter = UNIQ_KEY_SUFFIX.unpack_from(raw, UNIQ_KEY_PREFIX.size)
    return socket.inet_ntoa(ip), pid, loader, diff, counter
