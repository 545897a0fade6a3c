"""CommitLog records -> one ``pyarrow.RecordBatch``, with no Python object per message.

The hot path of every read (Spark, HTTP Arrow pull, Kafka fetch). The record layout is the
one in :mod:`store.format.record`; every position used here is imported from there. Input is ONE
contiguous CommitLog slice (``uint8``; an mmap view is fine) plus each record's start in it::

    starts ─► per chunk of rows ─► one BODY_POS-byte gather per record (the fixed header)
      │          ├─► int and timestamp columns, msg_id (hex via a 64K-entry lookup table)
      │          └─► body / topic / properties ranges, validated like ``check_record``
      │
      └─► body, properties (and topic unless every record has the same one): Arrow ``take``
          over an "interleaved" array laid on the slice (field, gap, field, gap, ...) = one
          C++ gather into one contiguous buffer per column

    properties blob ─► per chunk of rows: positions of \x01 and \x02 (two NumPy scans)
          ─► name/value ranges ─► TAGS / KEYS / UNIQ_KEY ranges per row, other pairs for the
          map ─► one ``take`` per output column (KEYS then split on spaces)

NumPy passes run over ``_CHUNK_ROWS`` rows at a time so temporaries stay in cache; multi-byte
reads at arbitrary positions are avoided where possible (NumPy's unaligned gathers are slow).
Records flagged COMPRESSED are the only per-row Python work (their bodies are inflated one by
one). Properties not in the canonical ``name\x01value\x02`` form that
:func:`store.format.record.encode_properties` writes (foreign or damaged bytes, invalid UTF-8, a
column property twice) send the batch through :func:`store.format.record.decode_properties` row by
row, so the result always equals what :func:`store.format.record.decode_record` gives. A name other
than TAGS/KEYS/UNIQ_KEY is assumed to appear once per record (the encoder writes a mapping).
The output never references ``buf``: the caller may unmap it as soon as this returns.
"""

from __future__ import annotations

import functools
import re
import struct
import zlib
from mmap import mmap
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import CorruptStore, InvalidArgument
from store.format.arrow_schema import COLUMN_PROPERTIES, MESSAGE_SCHEMA, TIMESTAMP
from store.format.record import (
    BODY_LEN_POS,
    BODY_POS,
    BORN_TIMESTAMP_POS,
    FIXED_OVERHEAD_V1,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MSG_ID,
    PHYSICAL_OFFSET_POS,
    PROPS_LEN,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECONSUME_TIMES_POS,
    RECORD_HEADER,
    STORE_HOST_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    TOTAL_SIZE_POS,
    decode_properties,
    ip4_bytes,
    restore_body,
)
from store.format.vocabulary import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_COMPRESSED,
)

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
#: One contiguous CommitLog slice.
SliceBytes = npt.NDArray[np.uint8] | memoryview | bytes | bytearray | mmap

#: Rows per NumPy pass: big enough to amortise Python overhead, small enough for L2/L3.
_CHUNK_ROWS: Final = 1 << 15
#: Largest byte offset an Arrow binary/string array (int32 offsets) can hold.
_INT32_OFFSETS_LIMIT: Final = int(np.iinfo(np.int32).max)
#: Slices larger than this are gathered through large_binary/large_string (int64 offsets).
_LARGE_SOURCE_BYTES: Final = _INT32_OFFSETS_LIMIT
#: Widths derived from the codec's positions (a field ends where the next one starts).
_STORE_HOST_WIDTH: Final = RECONSUME_TIMES_POS - STORE_HOST_POS  # IPv4 4 + port 4
_PHYSICAL_OFFSET_WIDTH: Final = SYS_FLAG_POS - PHYSICAL_OFFSET_POS
assert MSG_ID.size == _STORE_HOST_WIDTH + _PHYSICAL_OFFSET_WIDTH, "offsetMsgId = store host + offset"
assert _STORE_HOST_WIDTH == 8, "IPv4 store host: 4 address bytes + 4 port bytes"
_MSG_ID_DIGITS: Final = 2 * MSG_ID.size
_HOST_DIGITS: Final = 2 * _STORE_HOST_WIDTH
_SEP_NAME: Final = ord(NAME_VALUE_SEPARATOR)
_SEP_PAIR: Final = ord(PROPERTY_SEPARATOR)
_KEY_SEPARATOR: Final = ord(" ")
_NO_BYTES: Final[U8] = np.zeros(0, dtype=np.uint8)


def _header_dtypes() -> dict[int, np.dtype[Any]]:
    """NumPy dtype of every integer field of the codec's ``RECORD_HEADER``, by position:
    derived from its struct format, so no width or signedness is retyped here."""
    byte_order, position, dtypes = RECORD_HEADER.format[0], 0, {}
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", RECORD_HEADER.format[1:]):
        if code != "s":
            dtypes[position] = np.dtype(byte_order + code)
        position += struct.calcsize(byte_order + count + code)
    assert position == BODY_POS, "the header ends where the body starts"
    return dtypes


_HEADER_DTYPES: Final = _header_dtypes()
#: Longest topic checked for "every record has the same topic" (then no per-row topic gather).
_COMMON_TOPIC_MAX_BYTES: Final = 64
#: Upper-case hex of a byte / of a little-endian byte pair, as ASCII in memory order.
_HEX_OF_BYTE: Final = np.array([int.from_bytes(f"{b:02X}".encode(), "little") for b in range(256)], "<u2")
_HEX_OF_PAIR: Final = _HEX_OF_BYTE[np.arange(1 << 16) & 0xFF].astype("<u4") | (
    _HEX_OF_BYTE[np.arange(1 << 16) >> 8].astype("<u4") << 16
)
_KEYS_TYPE: Final = MESSAGE_SCHEMA.field("keys").type
_PROPERTIES_TYPE: Final = MESSAGE_SCHEMA.field("properties").type


def decode_records_to_arrow(
    buf: SliceBytes,
    starts: npt.ArrayLike,
    *,
    store_host: tuple[str, int] | None = None,
) -> pa.RecordBatch:
    """Decode the records starting at ``buf[starts[i]]`` into one batch in ``MESSAGE_SCHEMA``.

    ``buf`` is one contiguous CommitLog slice (NumPy ``uint8``, memoryview, bytes, mmap);
    ``starts`` are record positions *within it* (integers; any order, repeats allowed; rows
    come out in ``starts`` order, fastest when strictly ascending). ``msg_id`` is the
    offsetMsgId of each record's STOREHOST and PHYSICALOFFSET, as in
    :func:`store.format.record.decode_record`; ``store_host`` (ip, port) replaces the STOREHOST part.
    Bodies are decompressed.

    Raises :class:`CorruptStore` naming the first bad position when a start does not point at
    a complete V1/V2 record (bad magic, impossible or overlapping sizes, lengths that do not
    add up, non-UTF-8 topic, a body that does not inflate) and :class:`InvalidArgument` for an
    unusable ``buf``/``starts``. Arrow's int32 offsets limit one batch to < 2 GiB of bodies.
    """
    data = _as_bytes(buf)
    positions = np.asarray(starts)
    if positions.ndim != 1 or (len(positions) and positions.dtype.kind not in "iu"):
        raise InvalidArgument("starts must be a 1-D array of integer positions")
    positions = positions.astype(np.int64, copy=False)
    if len(positions) == 0:
        return pa.RecordBatch.from_pylist([], schema=MESSAGE_SCHEMA)
    if len(positions) > 1 and not bool(np.all(positions[1:] > positions[:-1])):
        unique, inverse = np.unique(positions, return_inverse=True)
        return _decode_ascending(data, unique, store_host).take(pa.array(inverse.reshape(-1)))
    return _decode_ascending(data, positions, store_host)


def decode_property_columns(
    buf: SliceBytes, begins: npt.ArrayLike, lengths: npt.ArrayLike
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``(uniq_key, tags, keys)`` of the properties strings at ``buf[begins[i]:][:lengths[i]]``.

    The ranges must be ascending and disjoint (consecutive records are). ``uniq_key`` and
    ``tags`` are string arrays (null where absent), ``keys`` a list<string> array (the KEYS
    tokens). Used by CommitLog scans to build dispatch batches without a Python dict per record.
    """
    data = _as_bytes(buf)
    source = pa.py_buffer(data)
    props = _gather_ranges(
        source, np.asarray(begins, dtype=np.int64), np.asarray(lengths, dtype=np.int64), pa.string()
    )
    columns = _property_columns(props)
    return columns.uniq_key, columns.tags, columns.keys


def decode_store_timestamps(buf: SliceBytes, starts: npt.ArrayLike) -> I64:
    """STORETIMESTAMP (ms) of the records at ``starts``: one gather, no other parsing."""
    return decode_int_field(buf, starts, STORE_TIMESTAMP_POS).astype(np.int64, copy=False)


def decode_int_field(
    buf: SliceBytes, starts: npt.ArrayLike, position: int, dtype: str | None = None
) -> npt.NDArray[np.integer]:
    """The big-endian integer field at ``starts + position``, in native byte order.

    ``position`` is one of the header ``*_POS`` constants of :mod:`store.format.record` (its type is
    then the codec's), or any offset with an explicit big-endian ``dtype`` such as ``">i4"``.
    Raises InvalidArgument if a field lies outside ``buf`` or the type is unknown.
    """
    data = _as_bytes(buf)
    if dtype is None and position not in _HEADER_DTYPES:
        raise InvalidArgument(f"no integer header field at +{position}: pass its dtype")
    item = _HEADER_DTYPES[position] if dtype is None else np.dtype(dtype)
    if item.kind not in "iu" or (item.itemsize > 1 and item.byteorder != ">"):
        raise InvalidArgument(f"dtype must be a big-endian integer type such as '>i4', got {dtype!r}")
    at = np.asarray(starts, dtype=np.int64).reshape(-1) + position
    if len(at) and (int(at.min()) < 0 or int(at.max()) + item.itemsize > len(data)):
        raise InvalidArgument(
            f"a field at +{position} ({item.itemsize} bytes) lies outside the {len(data)}-byte slice"
        )
    return _overlapping(data, item)[at].astype(item.newbyteorder("="))


# --- fixed fields and record layout ------------------------------------------------------------


class _Records:
    """Per-record outputs of the header pass (columns and field ranges), filled by chunks."""

    def __init__(self, count: int, store_host: tuple[str, int] | None) -> None:
        self.queue_id = np.empty(count, dtype=np.int32)
        self.queue_offset = np.empty(count, dtype=np.int64)
        self.commitlog_offset = np.empty(count, dtype=np.int64)
        self.sys_flag = np.empty(count, dtype=np.int32)
        self.born_us = np.empty(count, dtype=np.int64)
        self.store_us = np.empty(count, dtype=np.int64)
        self.reconsume_times = np.empty(count, dtype=np.int32)
        self.msg_id_digits = np.empty((count, _MSG_ID_DIGITS), dtype=np.uint8)
        if store_host is not None:
            host = MSG_ID.pack(ip4_bytes(store_host[0]), store_host[1], 0)[:_STORE_HOST_WIDTH]
            self.msg_id_digits[:, :_HOST_DIGITS] = _hex(np.frombuffer(host, dtype=np.uint8)[None, :])
        self.host_digits_done = store_host is not None
        self.body_begin = np.empty(count, dtype=np.int64)
        self.body_len = np.empty(count, dtype=np.int64)
        self.topic_begin = np.empty(count, dtype=np.int64)
        self.topic_len = np.empty(count, dtype=np.int64)
        self.props_begin = np.empty(count, dtype=np.int64)
        self.props_len = np.empty(count, dtype=np.int64)
        #: The topic of every record so far, while they all share one (None once they differ).
        self.common_topic: bytes | None = None

    def fill(self, data: U8, starts: I64, lo: int, hi: int) -> None:
        """Decode and validate the headers of rows ``[lo, hi)``."""
        at = starts[lo:hi]
        headers = _gather_headers(data, at)
        self.queue_id[lo:hi] = _header_field(headers, QUEUE_ID_POS)
        self.queue_offset[lo:hi] = _header_field(headers, QUEUE_OFFSET_POS)
        self.commitlog_offset[lo:hi] = _header_field(headers, PHYSICAL_OFFSET_POS)
        self.sys_flag[lo:hi] = _header_field(headers, SYS_FLAG_POS)
        np.multiply(_header_field(headers, BORN_TIMESTAMP_POS), 1000, out=self.born_us[lo:hi])
        np.multiply(_header_field(headers, STORE_TIMESTAMP_POS), 1000, out=self.store_us[lo:hi])
        self.reconsume_times[lo:hi] = _header_field(headers, RECONSUME_TIMES_POS)
        digits = self.msg_id_digits[lo:hi]
        if not self.host_digits_done:
            hosts = headers[:, STORE_HOST_POS : STORE_HOST_POS + _STORE_HOST_WIDTH]
            host_words = _header_field(headers, STORE_HOST_POS, np.dtype("<u8"))  # ip + port, one word
            same_host = bool(np.all(host_words == host_words[0]))
            digits[:, :_HOST_DIGITS] = _hex(hosts[:1] if same_host else hosts)
        digits[:, _HOST_DIGITS:] = _hex(
            headers[:, PHYSICAL_OFFSET_POS : PHYSICAL_OFFSET_POS + _PHYSICAL_OFFSET_WIDTH]
        )
        self._locate(data, starts, lo, hi, headers)

    def _locate(self, data: U8, starts: I64, lo: int, hi: int, headers: U8) -> None:
        """Body/topic/properties ranges of rows ``[lo, hi)``, checked like ``check_record``."""
        at = starts[lo:hi]
        total = _header_field(headers, TOTAL_SIZE_POS).astype(np.int64)
        magic = _header_field(headers, MAGIC_POS)
        is_v2 = magic == MAGIC_V2
        _require(at, (magic == MAGIC_V1) | is_v2, "bad magic code")
        wide_prefix = is_v2 * (TOPIC_LEN_V2.size - TOPIC_LEN_V1.size)
        overhead = FIXED_OVERHEAD_V1 + wide_prefix
        _require(at, total >= overhead, "impossible total size")
        ends = at + total
        _require(at, ends <= len(data), "record runs past the end of the slice")
        next_at = starts[lo + 1 : hi + 1]
        _require(at, ends[: len(next_at)] <= next_at, "record overlaps the next start")
        body_begin = self.body_begin[lo:hi]
        body_len = self.body_len[lo:hi]
        np.add(at, BODY_POS, out=body_begin)
        body_len[:] = _header_field(headers, BODY_LEN_POS)
        _require(at, (body_len >= 0) & (body_len <= total - overhead), "bad body length")
        topic_len_at = body_begin + body_len
        topic_len = self.topic_len[lo:hi]
        topic_len[:] = _overlapping(data, TOPIC_LEN_V1.format)[topic_len_at]
        if wide_prefix.any():
            topic_len[is_v2] = _read_u16(data, topic_len_at[is_v2], TOPIC_LEN_V2.format)
        topic_begin = self.topic_begin[lo:hi]
        np.add(topic_len_at, TOPIC_LEN_V1.size + wide_prefix, out=topic_begin)
        props_len_at = topic_begin + topic_len
        _require(at, props_len_at + PROPS_LEN.size <= ends, "topic length exceeds the record")
        self._track_common_topic(data, lo, topic_begin, topic_len)
        props_begin = self.props_begin[lo:hi]
        props_len = self.props_len[lo:hi]
        np.add(props_len_at, PROPS_LEN.size, out=props_begin)
        props_len[:] = _read_u16(data, props_len_at, PROPS_LEN.format)
        _require(at, props_begin + props_len == ends, "lengths do not add up to total size")

    def _track_common_topic(self, data: U8, lo: int, topic_begin: I64, topic_len: I64) -> None:
        """Keep ``common_topic`` while every record's topic equals the first one (compared as
        8-byte words, read while the topic's cache line is hot)."""
        if lo == 0:
            first = int(topic_begin[0])
            self.common_topic = data[first : first + int(topic_len[0])].tobytes()
        topic = self.common_topic
        if topic is None:
            return
        if len(topic) > _COMMON_TOPIC_MAX_BYTES or not bool(np.all(topic_len == len(topic))):
            self.common_topic = None
            return
        words = _overlapping(data, "<u8").view(np.uint64)
        for offset, expected, mask in _topic_words(topic):
            if not bool(np.all((words[topic_begin + offset] & mask) == expected)):
                self.common_topic = None
                return


def _topic_words(topic: bytes) -> list[tuple[int, np.uint64, np.uint64]]:
    """(offset from the topic's start, expected little-endian word, mask) covering ``topic``.

    A topic shorter than 8 bytes is read as the word *ending* at its last byte (the bytes
    before it belong to the same record) and masked to its own bytes.
    """
    length = len(topic)
    if length == 0:
        return []
    if length < 8:
        shift = 8 * (8 - length)
        mask = ((1 << 64) - 1) >> shift << shift
        return [(length - 8, np.uint64(int.from_bytes(topic, "little") << shift), np.uint64(mask))]
    offsets = [*range(0, length - 7, 8), *([length - 8] if length % 8 else [])]
    every_bit = np.uint64((1 << 64) - 1)
    return [(at, np.uint64(int.from_bytes(topic[at : at + 8], "little")), every_bit) for at in offsets]


def _decode_ascending(data: U8, starts: I64, store_host: tuple[str, int] | None) -> pa.RecordBatch:
    """The decoder proper, for strictly ascending ``starts``."""
    count = len(starts)
    records = _Records(count, store_host)
    for lo in range(0, count, _CHUNK_ROWS):
        records.fill(data, starts, lo, min(lo + _CHUNK_ROWS, count))
    source = pa.py_buffer(data)
    if records.common_topic is None:
        topics = _gather_ranges(source, records.topic_begin, records.topic_len, pa.string())
    else:
        topics = _repeated_string(records.common_topic, count)
    _require_utf8(topics, starts, "topic")
    props = _property_columns(_gather_ranges(source, records.props_begin, records.props_len, pa.string()))
    columns: list[pa.Array] = [
        topics,
        pa.array(records.queue_id),
        pa.array(records.queue_offset),
        pa.array(records.commitlog_offset),
        _fixed_width_strings(records.msg_id_digits),
        props.uniq_key,
        props.tags,
        props.keys,
        _bodies(data, source, records),
        props.properties,
        pa.Array.from_buffers(TIMESTAMP, count, [None, pa.py_buffer(records.born_us)]),
        pa.Array.from_buffers(TIMESTAMP, count, [None, pa.py_buffer(records.store_us)]),
        pa.array(records.reconsume_times),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=MESSAGE_SCHEMA)


def _require(starts: I64, ok: Bools, reason: str) -> None:
    if not bool(np.all(ok)):
        position = int(starts[int(np.argmin(ok))])
        raise CorruptStore(f"no valid record at slice position {position}: {reason}")


def _as_bytes(buf: SliceBytes) -> U8:
    data = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if data.dtype != np.uint8 or data.ndim != 1 or not data.flags.c_contiguous:
        raise InvalidArgument("buf must be one contiguous 1-D uint8 buffer")
    return data


def _overlapping(data: U8, dtype: str | np.dtype[np.generic]) -> npt.NDArray[np.generic]:
    """A view with one ``dtype`` item starting at *every* byte of ``data`` (stride 1)."""
    item = np.dtype(dtype)
    count = max(len(data) - item.itemsize + 1, 0)
    return np.ndarray((count,), dtype=item, buffer=data, strides=(1,))


def _gather_headers(data: U8, starts: I64) -> U8:
    """The fixed part (``BODY_POS`` bytes) of every record, as an ``(n, BODY_POS)`` array."""
    inside = (starts >= 0) & (starts + BODY_POS <= len(data))
    _require(starts, inside, "record runs past the end of the slice")
    rows = _overlapping(data, np.dtype((np.void, BODY_POS)))[starts]
    return rows.view(np.uint8).reshape(len(starts), BODY_POS)


def _header_field(headers: U8, position: int, dtype: np.dtype[Any] | None = None) -> npt.NDArray[np.integer]:
    """The header field at ``position`` of every row, as a strided view (no copy); its type is
    the codec's unless ``dtype`` reinterprets the bytes."""
    item = _HEADER_DTYPES[position] if dtype is None else dtype
    return np.ndarray((len(headers),), dtype=item, buffer=headers, offset=position, strides=(BODY_POS,))


def _read_u16(data: U8, positions: I64, struct_format: str) -> I64:
    """A 2-byte unsigned field at each position (two 1-byte gathers: NumPy's unaligned
    multi-byte gathers take a slow path)."""
    assert struct_format in (">H", "<H"), struct_format
    first = data[positions].astype(np.int64)
    second = data[positions + 1].astype(np.int64)
    return (first << 8) | second if struct_format == ">H" else (second << 8) | first


def _hex(raw: U8) -> U8:
    """``(rows, k)`` bytes -> ``(rows, 2k)`` upper-case hex digits (ASCII)."""
    if raw.shape[1] % 2:
        digits: U8 = _HEX_OF_BYTE[raw].view(np.uint8)
    else:
        digits = _HEX_OF_PAIR[np.ascontiguousarray(raw).view("<u2")].view(np.uint8)
    return digits


def _repeated_string(value: bytes, count: int) -> pa.Array:
    """A string array of ``count`` times ``value`` (built without a per-row gather)."""
    chars = np.tile(np.frombuffer(value, dtype=np.uint8), count).reshape(count, len(value))
    return _fixed_width_strings(chars)


def _fixed_width_strings(chars: U8) -> pa.Array:
    """A string array whose i-th value is row i of the ``(n, width)`` ASCII/UTF-8 array."""
    count, width = chars.shape
    if count * width > _INT32_OFFSETS_LIMIT:
        raise InvalidArgument(f"{count} values of {width} bytes exceed one Arrow string array")
    offsets = np.arange(count + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(chars)])


def _gather_ranges(source: pa.Buffer, begins: I64, lengths: I64, value_type: pa.DataType) -> pa.Array:
    """``source[begins[i] : begins[i] + lengths[i]]`` for every i, as one contiguous Arrow array.

    The ranges must be ascending and disjoint. They become the even elements of an array
    laid directly on ``source`` (odd elements are the gaps); Arrow's ``take`` copies them out.
    """
    count = len(begins)
    large = source.size > _LARGE_SOURCE_BYTES
    offsets = np.empty(2 * count + 1, dtype=np.int64 if large else np.int32)
    offsets[0:-1:2] = begins
    np.add(begins, lengths, out=offsets[1::2])
    offsets[-1] = offsets[-2] if count else 0
    base_type = (
        ({pa.binary(): pa.large_binary(), pa.string(): pa.large_string()}[value_type])
        if large
        else value_type
    )
    interleaved = pa.Array.from_buffers(base_type, 2 * count, [None, pa.py_buffer(offsets), source])
    picked = pc.take(interleaved, _even_numbers(count), boundscheck=False)
    return picked.cast(value_type) if large else picked


def _even_numbers(count: int) -> pa.Array:
    """``[0, 2, 4, ...]`` (``count`` of them), sliced from a cached power-of-two-sized array."""
    return _even_numbers_upto(max(1 << 10, 1 << (count - 1).bit_length())).slice(0, count)


@functools.lru_cache(maxsize=4)
def _even_numbers_upto(capacity: int) -> pa.Array:
    # A few sizes live at once (rows, pairs, key tokens); at most ~2x the largest batch's.
    # int32 indices (and no bounds check: they are in range by construction) take fastest.
    return pa.array(np.arange(0, 2 * capacity, 2, dtype=np.int32 if capacity <= 1 << 30 else np.int64))


def _require_utf8(strings: pa.Array, starts: I64, what: str) -> None:
    if _is_utf8(strings):
        return
    for row, value in enumerate(strings.cast(pa.binary()).to_pylist()):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptStore(
                f"no valid record at slice position {starts[row]}: {what} is not UTF-8"
            ) from None


def _is_utf8(strings: pa.Array) -> bool:
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _bodies(data: U8, source: pa.Buffer, records: _Records) -> pa.Array:
    """Stored bodies, with the COMPRESSED ones inflated (the only per-row loop)."""
    bodies = _gather_ranges(source, records.body_begin, records.body_len, pa.binary())
    compressed = np.flatnonzero(records.sys_flag & SYSFLAG_COMPRESSED)
    if len(compressed) == 0:
        return bodies
    inflated: list[bytes] = []
    for row in compressed.tolist():
        begin = int(records.body_begin[row])
        stored = data[begin : begin + int(records.body_len[row])].tobytes()
        try:
            inflated.append(restore_body(stored, int(records.sys_flag[row])))
        except zlib.error as exc:
            raise CorruptStore(f"body at slice position {begin} does not inflate: {exc}") from exc
    index = np.arange(len(bodies), dtype=np.int64)
    index[compressed] = len(bodies) + np.arange(len(compressed))
    return pa.concat_arrays([bodies, pa.array(inflated, pa.binary())]).take(pa.array(index))


# --- properties ------------------------------------------------------------------------------


class _PropertyColumns(NamedTuple):
    uniq_key: pa.Array
    tags: pa.Array
    keys: pa.Array
    properties: pa.Array


class _Pairs(NamedTuple):
    """The ``name\\x01value\\x02`` pairs of a run of rows, as positions in their bytes."""

    name_begin: I64
    name_len: I64
    value_begin: I64
    value_len: I64
    row_pairs: I64  # pairs of row r are [row_pairs[r], row_pairs[r + 1])


class _PropertyRanges:
    """Where each output value lies in the properties blob, filled chunk by chunk.

    TAGS/KEYS/UNIQ_KEY: one (begin, length, present) per row; absent rows get an empty range
    at their own start so that the ranges stay ascending. Other pairs: lists per chunk.
    """

    def __init__(self, row_bytes: I64) -> None:
        count = len(row_bytes) - 1
        self.row_bytes = row_bytes
        self.begin = {name: row_bytes[:-1].copy() for name in COLUMN_PROPERTIES}
        self.length = {name: np.zeros(count, dtype=np.int64) for name in COLUMN_PROPERTIES}
        self.present = {name: np.zeros(count, dtype=np.bool_) for name in COLUMN_PROPERTIES}
        self.map_entries = np.zeros(count, dtype=np.int64)
        self.kept: list[tuple[I64, I64, I64, I64]] = []

    def parse(self, blob: U8, lo: int, hi: int) -> bool:
        """Parse rows ``[lo, hi)``; False when they are not in the canonical encoding."""
        base = int(self.row_bytes[lo])
        local = self.row_bytes[lo : hi + 1] - base
        segment = blob[base : int(self.row_bytes[hi])]
        pairs = _canonical_pairs(segment, local)
        if pairs is None:
            return False
        found = _find_names(segment, pairs.name_begin, pairs.name_len, COLUMN_PROPERTIES)
        pairs_per_row = np.diff(pairs.row_pairs)
        pair_rows = np.repeat(np.arange(lo, hi, dtype=np.int64), pairs_per_row)
        kept = np.ones(len(pairs.name_begin), dtype=np.bool_)
        self.map_entries[lo:hi] = pairs_per_row
        for name, idx in found.items():
            rows = pair_rows[idx]
            if len(rows) > 1 and not bool(np.all(rows[1:] > rows[:-1])):
                return False  # a column property twice in one record
            # every row has it (the usual case): plain slices instead of scatters
            at: slice | I64 = slice(lo, hi) if len(rows) == hi - lo else rows
            self.begin[name][at] = pairs.value_begin[idx] + base
            self.length[name][at] = pairs.value_len[idx]
            self.present[name][at] = True
            self.map_entries[at] -= 1
            kept[idx] = False
        if len(found) and not bool(kept.all()):
            keep = np.flatnonzero(kept)
            pairs = _Pairs(
                pairs.name_begin[keep],
                pairs.name_len[keep],
                pairs.value_begin[keep],
                pairs.value_len[keep],
                pairs.row_pairs,
            )
        self.kept.append((pairs.name_begin + base, pairs.name_len, pairs.value_begin + base, pairs.value_len))
        return True

    def columns(self, blob: pa.Buffer) -> _PropertyColumns:
        count = len(self.row_bytes) - 1
        keys_rows = np.flatnonzero(self.present[PROPERTY_KEYS])
        keys_values = _gather_ranges(
            blob, self.begin[PROPERTY_KEYS][keys_rows], self.length[PROPERTY_KEYS][keys_rows], pa.string()
        )
        name_begin, name_len, value_begin, value_len = (
            np.concatenate(part) for part in zip(*self.kept, strict=True)
        )
        map_offsets = np.zeros(count + 1, dtype=np.int32)
        np.cumsum(self.map_entries, out=map_offsets[1:])
        properties = pa.MapArray.from_arrays(
            pa.array(map_offsets),
            _gather_ranges(blob, name_begin, name_len, pa.string()),
            _gather_ranges(blob, value_begin, value_len, pa.string()),
            type=_PROPERTIES_TYPE,
        )
        return _PropertyColumns(
            self._nullable_strings(blob, PROPERTY_UNIQ_KEY),
            self._nullable_strings(blob, PROPERTY_TAGS),
            _split_keys(keys_values, keys_rows, count),
            properties,
        )

    def _nullable_strings(self, blob: pa.Buffer, name: str) -> pa.Array:
        strings = _gather_ranges(blob, self.begin[name], self.length[name], pa.string())
        present = self.present[name]
        missing = len(present) - int(np.count_nonzero(present))
        if missing == 0:
            return strings
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
        return pa.Array.from_buffers(
            pa.string(), len(present), [validity, *strings.buffers()[1:]], null_count=missing
        )


def _property_columns(props: pa.Array) -> _PropertyColumns:
    """uniq_key, tags, keys and properties columns from each record's properties string."""
    count = len(props)
    row_bytes = np.frombuffer(props.buffers()[1], dtype=np.int32, count=count + 1).astype(np.int64)
    blob_buffer = props.buffers()[2] if props.buffers()[2] is not None else pa.py_buffer(b"")
    blob = (
        np.frombuffer(blob_buffer, dtype=np.uint8, count=int(row_bytes[-1])) if row_bytes[-1] else _NO_BYTES
    )
    if not _is_utf8(props):
        return _property_columns_per_row(props)
    ranges = _PropertyRanges(row_bytes)
    for lo in range(0, count, _CHUNK_ROWS):
        if not ranges.parse(blob, lo, min(lo + _CHUNK_ROWS, count)):
            return _property_columns_per_row(props)
    return ranges.columns(blob_buffer)


def _canonical_pairs(segment: U8, row_bytes: I64) -> _Pairs | None:
    """The pairs when every row is exactly ``(name\\x01value\\x02)*`` with non-empty names and
    values (what the encoder writes); None otherwise. ``row_bytes`` are row offsets in it."""
    name_end = np.flatnonzero(segment == _SEP_NAME)
    value_end = np.flatnonzero(segment == _SEP_PAIR)
    row_pairs = np.zeros(len(row_bytes), dtype=np.int64)
    if len(name_end) != len(value_end):
        return None
    if len(value_end) == 0:
        return _Pairs(value_end, value_end, value_end, value_end, row_pairs) if len(segment) == 0 else None
    name_begin = np.empty(len(value_end), dtype=np.int64)
    name_begin[0] = 0
    np.add(value_end[:-1], 1, out=name_begin[1:])
    name_len = name_end - name_begin
    value_len = value_end - name_end
    value_len -= 1
    if int(value_end[-1]) != len(segment) - 1 or int(name_len.min()) <= 0 or int(value_len.min()) <= 0:
        return None
    # A pair closes a row when the byte after its \x02 is a row boundary. Every non-empty row
    # must be closed so (boundaries of empty rows coincide with another row's, or with 0).
    ends = row_bytes[1:]
    nonempty = ends > row_bytes[:-1]
    boundary = np.zeros(len(segment) + 1, dtype=np.bool_)
    boundary[ends] = True
    last_pairs = np.flatnonzero(boundary[value_end + 1])
    if len(last_pairs) != int(np.count_nonzero(nonempty)):
        return None  # a row whose bytes do not end with a \x02
    row_pairs[1:][nonempty] = last_pairs + 1
    np.maximum.accumulate(row_pairs, out=row_pairs)
    return _Pairs(name_begin, name_len, name_end + 1, value_len, row_pairs)


def _find_names(blob: U8, name_begin: I64, name_len: I64, names: frozenset[str]) -> dict[str, I64]:
    """Indexes of the pairs named each of ``names``: one gather of every name's first bytes,
    then the rest compared on the few candidates left."""
    targets = {name: name.encode("utf-8") for name in names}
    # Every name is followed by at least 3 bytes (\x01, a value, \x02): 4-byte reads are safe.
    head = min(4, *(len(t) for t in targets.values()))
    heads = _overlapping(blob, f"<u{head}")[name_begin]
    found: dict[str, I64] = {}
    for name, target in targets.items():
        word = np.frombuffer(target[:head], dtype=f"<u{head}")[0]
        candidates = np.flatnonzero(heads == word)
        candidates = candidates[name_len[candidates] == len(target)]
        for done in range(head, len(target), head):
            width = min(head, len(target) - done)
            window = _overlapping(blob, f"<u{width}") if width in (1, 2, 4) else None
            if window is None:
                for at in range(done, done + width):
                    candidates = candidates[blob[name_begin[candidates] + at] == target[at]]
            else:
                word = np.frombuffer(target[done : done + width], dtype=f"<u{width}")[0]
                candidates = candidates[window[name_begin[candidates] + done] == word]
        found[name] = candidates
    return found


def _split_keys(keys_values: pa.Array, rows: I64, count: int) -> pa.Array:
    """The ``keys`` list column: each KEYS value split on spaces, empty lists elsewhere."""
    if len(keys_values) == 0:
        empty = pa.array(np.zeros(count + 1, dtype=np.int32))
        return pa.ListArray.from_arrays(empty, keys_values, type=_KEYS_TYPE)
    value_bytes = np.frombuffer(keys_values.buffers()[1], dtype=np.int32, count=len(keys_values) + 1)
    total = int(value_bytes[-1])
    data = keys_values.buffers()[2]
    blob = np.frombuffer(data, dtype=np.uint8, count=total) if total else _NO_BYTES
    spaces = np.flatnonzero(blob == _KEY_SEPARATOR)
    if len(spaces) == 0:
        tokens, per_value = keys_values, np.ones(len(rows), dtype=np.int64)
    else:
        begins = np.sort(np.concatenate((value_bytes[:-1].astype(np.int64), spaces + 1)), kind="stable")
        ends = np.sort(np.concatenate((spaces, value_bytes[1:].astype(np.int64))), kind="stable")
        tokens = _gather_ranges(data, begins, ends - begins, pa.string())
        per_value = np.diff(np.searchsorted(spaces, value_bytes)) + 1
    per_row = np.zeros(count, dtype=np.int64)
    per_row[rows] = per_value
    list_offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(per_row, out=list_offsets[1:])
    return pa.ListArray.from_arrays(pa.array(list_offsets), tokens, type=_KEYS_TYPE)


def _property_columns_per_row(props: pa.Array) -> _PropertyColumns:
    """Slow path for non-canonical properties: :func:`store.format.record.decode_properties` per row."""
    decoded = [decode_properties(raw) for raw in props.cast(pa.binary()).to_pylist()]
    keys = [d[PROPERTY_KEYS].split(" ") if d.get(PROPERTY_KEYS) else [] for d in decoded]
    rest = [[(k, v) for k, v in d.items() if k not in COLUMN_PROPERTIES] for d in decoded]
    return _PropertyColumns(
        pa.array([d.get(PROPERTY_UNIQ_KEY) for d in decoded], pa.string()),
        pa.array([d.get(PROPERTY_TAGS) for d in decoded], pa.string()),
        pa.array(keys, _KEYS_TYPE),
        pa.array(rest, _PROPERTIES_TYPE),
    )
