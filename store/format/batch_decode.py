"""CommitLog records -> one ``pyarrow.RecordBatch``, with no Python object per message.

The hot path of every read (Spark, HTTP Arrow pull, Kafka fetch). The record layout is the
one in :mod:`store.format.record`; every position used here is imported from there. Input is ONE
contiguous CommitLog slice (``uint8``; an mmap view is fine) plus each record's start in it::

    starts ─► per chunk of rows ─► one BODY_POS-byte gather per record (the fixed header)
      │          ├─► int and timestamp columns, msg_id (hex via a 64K-entry lookup table)
      │          └─► body / topic / properties ranges, from the record checker
      │
      └─► body, properties (and topic unless every record has the same one): Arrow ``take``
          over an "interleaved" array laid on the slice (field, gap, field, gap, ...) = one
          C++ gather into one contiguous buffer per column

    properties blob ─► :mod:`store.format.property_columns` (UNIQ_KEY, TAGS, KEYS, the map)

Records are judged by the record checker (:func:`store.format.record_check.check_records`):
the first record that fails raises CorruptStore naming its position and the verdict.
NumPy passes run over ``CHUNK_ROWS`` rows at a time so temporaries stay in cache; multi-byte
reads at arbitrary positions are avoided where possible (NumPy's unaligned gathers are slow).
Records flagged COMPRESSED are the only per-row Python work (their bodies are inflated one by
one), so the result always equals what :func:`store.format.record_check.decode_record` gives.
The output never references ``buf``: the caller may unmap it as soon as this returns.
"""

from __future__ import annotations

import zlib
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.errors import CorruptStore, InvalidArgument
from store.format.arrow_ranges import CHUNK_ROWS, SliceBytes, as_bytes, gather_ranges, is_utf8
from store.format.arrow_schema import EMPTY_MESSAGE_BATCH, MESSAGE_SCHEMA, TIMESTAMP
from store.format.ids import (
    MSG_ID_HEX_LEN,
    MSG_ID_HOST_BYTES,
    MSG_ID_HOST_DIGITS,
    ascii_rows_array,
    hex_of_bytes,
    msg_id_host_bytes,
)
from store.format.property_columns import property_columns
from store.format.record import (
    BORN_TIMESTAMP_POS,
    PHYSICAL_OFFSET_POS,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECONSUME_TIMES_POS,
    STORE_HOST_POS,
    STORE_TIMESTAMP_POS,
    SYS_FLAG_POS,
    restore_body,
)
from store.format.record_check import (
    HEADER_DTYPES,
    RangeColumns,
    Verdict,
    check_records,
    gather_headers,
    header_field,
    overlapping,
)
from store.format.vocabulary import SYSFLAG_COMPRESSED

U8 = npt.NDArray[np.uint8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


#: Widths derived from the codec's positions (a field ends where the next one starts).
_STORE_HOST_WIDTH: Final = RECONSUME_TIMES_POS - STORE_HOST_POS  # IPv4 4 + port 4
_PHYSICAL_OFFSET_WIDTH: Final = SYS_FLAG_POS - PHYSICAL_OFFSET_POS
assert MSG_ID_HOST_BYTES == _STORE_HOST_WIDTH, "offsetMsgId = STOREHOST + PHYSICALOFFSET"
assert MSG_ID_HEX_LEN == 2 * (_STORE_HOST_WIDTH + _PHYSICAL_OFFSET_WIDTH)
#: Longest topic checked for "every record has the same topic" (then no per-row topic gather).
_COMMON_TOPIC_MAX_BYTES: Final = 64


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
    data = as_bytes(buf)
    positions = np.asarray(starts)
    if positions.ndim != 1 or (len(positions) and positions.dtype.kind not in "iu"):
        raise InvalidArgument("starts must be a 1-D array of integer positions")
    positions = positions.astype(np.int64, copy=False)
    if len(positions) == 0:
        return EMPTY_MESSAGE_BATCH
    if len(positions) > 1 and not bool(np.all(positions[1:] > positions[:-1])):
        unique, inverse = np.unique(positions, return_inverse=True)
        return _decode_ascending(data, unique, store_host).take(pa.array(inverse.reshape(-1)))
    return _decode_ascending(data, positions, store_host)


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
    data = as_bytes(buf)
    if dtype is None and position not in HEADER_DTYPES:
        raise InvalidArgument(f"no integer header field at +{position}: pass its dtype")
    item = HEADER_DTYPES[position] if dtype is None else np.dtype(dtype)
    if item.kind not in "iu" or (item.itemsize > 1 and item.byteorder != ">"):
        raise InvalidArgument(f"dtype must be a big-endian integer type such as '>i4', got {dtype!r}")
    at = np.asarray(starts, dtype=np.int64).reshape(-1) + position
    if len(at) and (int(at.min()) < 0 or int(at.max()) + item.itemsize > len(data)):
        raise InvalidArgument(
            f"a field at +{position} ({item.itemsize} bytes) lies outside the {len(data)}-byte slice"
        )
    return overlapping(data, item)[at].astype(item.newbyteorder("="))


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
        self.msg_id_digits = np.empty((count, MSG_ID_HEX_LEN), dtype=np.uint8)
        if store_host is not None:
            host = np.frombuffer(msg_id_host_bytes(store_host), dtype=np.uint8)
            self.msg_id_digits[:, :MSG_ID_HOST_DIGITS] = hex_of_bytes(host[None, :])
        self.host_digits_done = store_host is not None
        self.body_begin = np.empty(count, dtype=np.int64)
        self.body_len = np.empty(count, dtype=np.int64)
        self.topic_begin = np.empty(count, dtype=np.int64)
        self.topic_len = np.empty(count, dtype=np.int64)
        self.props_begin = np.empty(count, dtype=np.int64)
        self.props_len = np.empty(count, dtype=np.int64)
        #: The topic of every record so far, while they all share one (None once they differ).
        self.common_topic: bytes | None = None
        #: (row, verdict) of the first record that fails the record checker.
        self.failure: tuple[int, Verdict] | None = None

    def fill(self, data: U8, starts: I64, lo: int, hi: int) -> bool:
        """Decode and check the headers of rows ``[lo, hi)``; False (and ``failure`` set) when
        a record fails the record checker."""
        at = starts[lo:hi]
        headers = gather_headers(data, at)
        ranges = RangeColumns(
            self.body_begin, self.body_len, self.topic_begin, self.topic_len, self.props_begin, self.props_len
        ).rows(lo, hi)
        spans = check_records(data, at, headers=headers, next_starts=starts[lo + 1 : hi + 1], out=ranges)
        if spans.valid < len(at):  # the passing rows' topics are kept: one may be bad UTF-8
            self.failure = (lo + spans.valid, spans.verdict)
            return False
        self.queue_id[lo:hi] = header_field(headers, QUEUE_ID_POS)
        self.queue_offset[lo:hi] = header_field(headers, QUEUE_OFFSET_POS)
        self.commitlog_offset[lo:hi] = header_field(headers, PHYSICAL_OFFSET_POS)
        self.sys_flag[lo:hi] = header_field(headers, SYS_FLAG_POS)
        np.multiply(header_field(headers, BORN_TIMESTAMP_POS), 1000, out=self.born_us[lo:hi])
        np.multiply(header_field(headers, STORE_TIMESTAMP_POS), 1000, out=self.store_us[lo:hi])
        self.reconsume_times[lo:hi] = header_field(headers, RECONSUME_TIMES_POS)
        digits = self.msg_id_digits[lo:hi]
        if not self.host_digits_done:
            hosts = headers[:, STORE_HOST_POS : STORE_HOST_POS + _STORE_HOST_WIDTH]
            host_words = header_field(headers, STORE_HOST_POS, np.dtype("<u8"))  # ip + port, one word
            same_host = bool(np.all(host_words == host_words[0]))
            digits[:, :MSG_ID_HOST_DIGITS] = hex_of_bytes(hosts[:1] if same_host else hosts)
        digits[:, MSG_ID_HOST_DIGITS:] = hex_of_bytes(
            headers[:, PHYSICAL_OFFSET_POS : PHYSICAL_OFFSET_POS + _PHYSICAL_OFFSET_WIDTH]
        )
        self._track_common_topic(data, lo, ranges.topic_begin, ranges.topic_len)
        return True

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
        words = overlapping(data, "<u8").view(np.uint64)
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
    for lo in range(0, count, CHUNK_ROWS):
        if not records.fill(data, starts, lo, min(lo + CHUNK_ROWS, count)):
            _raise_first_failure(data, starts, records)
    source = pa.py_buffer(data)
    if records.common_topic is None:
        topics = gather_ranges(source, records.topic_begin, records.topic_len, pa.string())
    else:
        topics = _repeated_string(records.common_topic, count)
    _require_utf8(topics, starts, "topic")
    props = property_columns(gather_ranges(source, records.props_begin, records.props_len, pa.string()))
    columns: list[pa.Array] = [
        topics,
        pa.array(records.queue_id),
        pa.array(records.queue_offset),
        pa.array(records.commitlog_offset),
        ascii_rows_array(records.msg_id_digits),
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


def _raise_first_failure(data: U8, starts: I64, records: _Records) -> None:
    """Raise CorruptStore for the first failing record, a non-UTF-8 topic before it included."""
    assert records.failure is not None
    row, verdict = records.failure
    source = pa.py_buffer(data)
    topics = gather_ranges(source, records.topic_begin[:row], records.topic_len[:row], pa.string())
    _require_utf8(topics, starts, "topic")
    raise CorruptStore(f"no valid record at slice position {int(starts[row])}: {verdict.reason}")


def _repeated_string(value: bytes, count: int) -> pa.Array:
    """A string array of ``count`` times ``value`` (built without a per-row gather)."""
    chars = np.tile(np.frombuffer(value, dtype=np.uint8), count).reshape(count, len(value))
    return ascii_rows_array(chars)


def _require_utf8(strings: pa.Array, starts: I64, what: str) -> None:
    if is_utf8(strings):
        return
    for row, value in enumerate(strings.cast(pa.binary()).to_pylist()):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptStore(
                f"no valid record at slice position {starts[row]}: {what} is not UTF-8"
            ) from None


def _bodies(data: U8, source: pa.Buffer, records: _Records) -> pa.Array:
    """Stored bodies, with the COMPRESSED ones inflated (the only per-row loop)."""
    bodies = gather_ranges(source, records.body_begin, records.body_len, pa.binary())
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
