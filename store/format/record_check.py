"""The record checker: whether bytes hold a CommitLog record, with one set of rules.

:func:`check_record` judges one position (single reads, and where a scan stops);
:func:`check_records` judges many record starts at once with NumPy (recovery and dispatch
scans, :func:`store.format.batch_decode.decode_records_to_arrow`). Both apply these checks,
in this order, and give the first record that fails the same :class:`Verdict` (a Hypothesis
test damages random runs and compares them, tests/store/test_record_check.py)::

    verdict          a record at ``pos`` fails it when
    END              fewer than 8 bytes are left, or TOTALSIZE and MAGICCODE are both zero
    BLANK            MAGICCODE is BLANK_MAGIC (the end-of-file filler: not damage)
    PAST_END         fewer bytes are left than the fixed header (88)
    BAD_MAGIC        MAGICCODE is neither V1 nor V2
    IMPOSSIBLE_SIZE  TOTALSIZE is below the fixed overhead of its version (91 / 92)
    PAST_END         the record runs past the end of the buffer
    BODY_LENGTH      BODYLEN is negative or leaves no room for the topic and properties
    TOPIC_LENGTH     TOPICLEN runs past the record
    LENGTHS          body, topic and properties do not add up to TOTALSIZE
    OVERLAP          (``check_records`` given starts) the next start lies inside this record
    BODY_CRC         (``check_crc``) BODYCRC is not the masked CRC32 of the stored body
    TOPIC_NOT_UTF8   the topic is not UTF-8

The UTF-8 check of many records is the caller's (each has a cheaper way for its own topic
column); :func:`with_topic_verdict` folds its first bad row into the verdict by the rule above.
Everything here is a pure function on bytes.
"""

from __future__ import annotations

import enum
import re
import socket
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from store.errors import CorruptStore
from store.format.ids import encode_msg_id
from store.format.record import (
    BLANK_MAGIC,
    BLANK_RECORD,
    BODY_CRC_POS,
    BODY_LEN_POS,
    BODY_POS,
    CRC_MASK,
    FIXED_OVERHEAD_V1,
    FIXED_OVERHEAD_V2,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    PROPS_LEN,
    RECORD_HEADER,
    TOPIC_LEN_V1,
    TOPIC_LEN_V2,
    TOTAL_SIZE_POS,
    RecordHeader,
    body_crc,
    decode_properties,
    restore_body,
)
from store.types import MessageView

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class Verdict(enum.IntEnum):
    """What a position holds; everything but OK, BLANK and END is damage."""

    OK = 0
    END = 1
    BLANK = 2
    BAD_MAGIC = 3
    IMPOSSIBLE_SIZE = 4
    PAST_END = 5
    BODY_LENGTH = 6
    TOPIC_LENGTH = 7
    LENGTHS = 8
    OVERLAP = 9
    BODY_CRC = 10
    TOPIC_NOT_UTF8 = 11

    @property
    def reason(self) -> str:
        return _REASONS[self]


_REASONS: Final = {
    Verdict.OK: "",
    Verdict.END: "end of data",
    Verdict.BLANK: "blank record",
    Verdict.BAD_MAGIC: "bad magic code",
    Verdict.IMPOSSIBLE_SIZE: "impossible total size",
    Verdict.PAST_END: "record runs past the end",
    Verdict.BODY_LENGTH: "body length exceeds the record",
    Verdict.TOPIC_LENGTH: "topic length exceeds the record",
    Verdict.LENGTHS: "lengths do not add up to total size",
    Verdict.OVERLAP: "record overlaps the next start",
    Verdict.BODY_CRC: "body CRC mismatch",
    Verdict.TOPIC_NOT_UTF8: "topic is not UTF-8",
}


class RecordStatus(enum.Enum):
    """What :func:`check_record` found at a position."""

    OK = "ok"  # a complete, consistent record
    BLANK = "blank"  # end-of-file filler: continue in the next file
    END = "end"  # zero bytes: nothing was ever written here
    CORRUPT = "corrupt"  # anything else; ``reason`` says what


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """Outcome of :func:`check_record`; ``header``/``topic``/``properties`` set when OK."""

    status: RecordStatus
    size: int
    reason: str = ""
    header: RecordHeader | None = None
    topic: str = ""
    properties: dict[str, str] | None = None
    verdict: Verdict = Verdict.OK


def _fails(verdict: Verdict, detail: str = "") -> RecordCheck:
    status = {Verdict.END: RecordStatus.END, Verdict.BLANK: RecordStatus.BLANK}.get(
        verdict, RecordStatus.CORRUPT
    )
    reason = f"{verdict.reason} ({detail})" if detail else verdict.reason
    return RecordCheck(status, 0, reason, verdict=verdict)


# --- one record -------------------------------------------------------------------------------


def check_record(buf: bytes | bytearray | memoryview, pos: int, check_crc: bool) -> RecordCheck:
    """``checkMessageAndReturnSize``: the verdict on the record at ``buf[pos:]``.

    Never raises on bad data: returns END / BLANK (with the blank's size) / CORRUPT with a
    reason that starts with the :class:`Verdict`'s.
    """
    limit = len(buf)
    if pos + BLANK_RECORD.size > limit:
        return _fails(Verdict.END, "end of buffer")
    size, magic = BLANK_RECORD.unpack_from(buf, pos)
    if size == 0 and magic == 0:
        return _fails(Verdict.END)
    if magic == BLANK_MAGIC:
        return RecordCheck(RecordStatus.BLANK, size, Verdict.BLANK.reason, verdict=Verdict.BLANK)
    if pos + BODY_POS > limit:  # no room even for the fixed header
        return _fails(Verdict.PAST_END, f"{limit - pos} bytes left")
    if magic not in (MAGIC_V1, MAGIC_V2):
        return _fails(Verdict.BAD_MAGIC, f"0x{magic:08x}")
    overhead = FIXED_OVERHEAD_V1 if magic == MAGIC_V1 else FIXED_OVERHEAD_V2
    if size < overhead:
        return _fails(Verdict.IMPOSSIBLE_SIZE, str(size))
    if pos + size > limit:
        return _fails(Verdict.PAST_END, f"{size} bytes")
    header = RecordHeader._make(RECORD_HEADER.unpack_from(buf, pos))
    body_start = pos + BODY_POS
    topic_len_pos = body_start + header.body_len
    if header.body_len < 0 or header.body_len > size - overhead:
        return _fails(Verdict.BODY_LENGTH, str(header.body_len))
    topic_prefix = TOPIC_LEN_V1 if magic == MAGIC_V1 else TOPIC_LEN_V2
    (topic_len,) = topic_prefix.unpack_from(buf, topic_len_pos)
    props_len_pos = topic_len_pos + topic_prefix.size + topic_len
    if props_len_pos + PROPS_LEN.size > pos + size:
        return _fails(Verdict.TOPIC_LENGTH, str(topic_len))
    (props_len,) = PROPS_LEN.unpack_from(buf, props_len_pos)
    if props_len_pos + PROPS_LEN.size + props_len != pos + size:
        return _fails(Verdict.LENGTHS, str(size))
    if check_crc and body_crc(memoryview(buf)[body_start:topic_len_pos]) != header.body_crc:
        return _fails(Verdict.BODY_CRC)
    topic_start = topic_len_pos + topic_prefix.size
    try:
        topic = bytes(buf[topic_start : topic_start + topic_len]).decode("utf-8")
    except UnicodeDecodeError:
        return _fails(Verdict.TOPIC_NOT_UTF8)
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


# --- many records: header views -----------------------------------------------------------------


def _header_dtypes() -> dict[int, np.dtype[Any]]:
    """NumPy dtype of every integer field of ``RECORD_HEADER``, by position: derived from its
    struct format, so no width or signedness is retyped here."""
    byte_order, position, dtypes = RECORD_HEADER.format[0], 0, {}
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", RECORD_HEADER.format[1:]):
        if code != "s":
            dtypes[position] = np.dtype(byte_order + code)
        position += struct.calcsize(byte_order + count + code)
    assert position == BODY_POS, "the header ends where the body starts"
    return dtypes


HEADER_DTYPES: Final = _header_dtypes()


def overlapping(data: U8, dtype: str | np.dtype[Any]) -> npt.NDArray[Any]:
    """A view with one ``dtype`` item starting at *every* byte of ``data`` (stride 1)."""
    item = np.dtype(dtype)
    count = max(len(data) - item.itemsize + 1, 0)
    return np.ndarray((count,), dtype=item, buffer=data, strides=(1,))


def gather_headers(data: U8, starts: I64) -> U8:
    """The fixed part (``BODY_POS`` bytes) of every record, as an ``(n, BODY_POS)`` array.

    A start with fewer than ``BODY_POS`` bytes after it gets zeros: its verdict comes from
    :func:`check_record` (see :func:`check_records`)."""
    if len(data) < BODY_POS:
        return np.zeros((len(starts), BODY_POS), dtype=np.uint8)
    inside = (starts >= 0) & (starts <= len(data) - BODY_POS)
    clipped = starts if bool(inside.all()) else np.where(inside, starts, 0)
    rows = overlapping(data, np.dtype((np.void, BODY_POS)))[clipped]
    headers: U8 = rows.view(np.uint8).reshape(len(starts), BODY_POS)
    if not bool(inside.all()):
        headers[~inside] = 0
    return headers


def header_field(headers: U8, position: int, dtype: np.dtype[Any] | None = None) -> npt.NDArray[np.integer]:
    """The header field at ``position`` of every row, as a strided view (no copy); its type is
    the codec's unless ``dtype`` reinterprets the bytes."""
    item = HEADER_DTYPES[position] if dtype is None else dtype
    if len(headers) == 0:
        return np.zeros(0, dtype=item)
    return np.ndarray((len(headers),), dtype=item, buffer=headers, offset=position, strides=(BODY_POS,))


def read_u16(data: U8, positions: I64, struct_format: str, out: I64 | None = None) -> I64:
    """A 2-byte unsigned field at each position (two 1-byte gathers: NumPy's unaligned
    multi-byte gathers take a slow path), into ``out`` when given."""
    assert struct_format in (">H", "<H"), struct_format
    first = data[positions].astype(np.int64)
    second = data[positions + 1].astype(np.int64)
    high, low = (first, second) if struct_format == ">H" else (second, first)
    high <<= 8
    return np.bitwise_or(high, low, out=out)


def body_crcs(raw: bytes | bytearray | memoryview | U8, begins: I64, lengths: I64) -> npt.NDArray[np.int64]:
    """:func:`store.format.record.body_crc` of ``raw[begins[i]:][:lengths[i]]`` for every i."""
    source: bytes | memoryview = raw if isinstance(raw, bytes) else memoryview(raw)  # type: ignore[arg-type]
    slices = map(slice, begins.tolist(), (begins + lengths).tolist())
    bodies: Iterator[bytes | memoryview] = map(source.__getitem__, slices)
    crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=len(begins))
    return crcs & CRC_MASK


# --- many records: the checks ---------------------------------------------------------------------


class RangeColumns(NamedTuple):
    """The field ranges of records, an array each (one row per start): what
    :func:`check_records` computes, into arrays the caller may give."""

    body_begin: I64
    body_len: I64
    topic_begin: I64
    topic_len: I64
    props_begin: I64
    props_len: I64

    @classmethod
    def empty(cls, count: int) -> RangeColumns:
        return cls(*(np.empty(count, dtype=np.int64) for _ in cls._fields))

    def rows(self, lo: int, hi: int) -> RangeColumns:
        """Rows ``[lo, hi)`` of every array, as views."""
        return RangeColumns(*(column[lo:hi] for column in self))


class RecordSpans(NamedTuple):
    """:func:`check_records`' answer: records ``[0, valid)`` pass; ``verdict`` is record
    ``valid``'s (OK when all pass). The sizes and ranges are meaningful for the passing records."""

    valid: int
    verdict: Verdict
    total_size: I64
    ranges: RangeColumns


class _Marks:
    """Which rows failed a check so far, and the checks in order (one OR per check: the
    verdict of a row is that of the first check it failed, looked up for one row only)."""

    def __init__(self, count: int) -> None:
        self.bad = np.zeros(count, dtype=np.bool_)
        self.checks: list[tuple[Bools, Verdict]] = []

    def fail(self, failed: Bools, verdict: Verdict) -> None:
        self.checks.append((failed, verdict))
        self.bad |= failed

    def first(self) -> int:
        return int(np.argmax(self.bad)) if self.bad.any() else len(self.bad)

    def verdict_of(self, row: int) -> Verdict:
        return next(verdict for failed, verdict in self.checks if failed[row])


def check_records(
    data: U8,
    starts: I64,
    *,
    check_crc: bool = False,
    raw: bytes | bytearray | memoryview | None = None,
    headers: U8 | None = None,
    next_starts: I64 | None = None,
    out: RangeColumns | None = None,
) -> RecordSpans:
    """Vectorised :func:`check_record` over ascending ``starts`` in ``data`` (topics' UTF-8
    excepted: see :func:`with_topic_verdict`).

    ``headers`` may be passed when the caller gathered them already (:func:`gather_headers`);
    ``next_starts[i]`` (when given) is where record ``i + 1`` starts, for the OVERLAP check;
    ``raw`` is ``data`` as bytes, for faster CRCs; the ranges are written into ``out`` (one
    row per start) when given, and the answer's ranges are then those arrays.
    """
    count = len(starts)
    marks = _Marks(count)
    if count == 0:
        empty = np.zeros(0, dtype=np.int64)
        return RecordSpans(0, Verdict.OK, empty, RangeColumns(*(empty,) * 6))
    if headers is None:
        headers = gather_headers(data, starts)
    limit = len(data)
    total = header_field(headers, TOTAL_SIZE_POS).astype(np.int64)
    magic = header_field(headers, MAGIC_POS)
    # Too few bytes for a header (or outside the buffer): judged one by one below.
    short = (starts < 0) | (starts + BODY_POS > limit)
    marks.fail(short, Verdict.PAST_END)
    if limit < BODY_POS:  # nothing but short starts
        zeros = np.zeros(count, dtype=np.int64)
        return _spans(marks, data, starts, check_crc, short, zeros, RangeColumns(*(zeros,) * 6))
    marks.fail((total == 0) & (magic == 0), Verdict.END)
    marks.fail(magic == BLANK_MAGIC, Verdict.BLANK)
    is_v2 = magic == MAGIC_V2
    marks.fail(~((magic == MAGIC_V1) | is_v2), Verdict.BAD_MAGIC)
    wide_prefix = is_v2 * (TOPIC_LEN_V2.size - TOPIC_LEN_V1.size)
    overhead = FIXED_OVERHEAD_V1 + wide_prefix
    marks.fail(total < overhead, Verdict.IMPOSSIBLE_SIZE)
    ends = starts + total
    marks.fail(ends > limit, Verdict.PAST_END)
    o = out if out is not None else RangeColumns.empty(count)
    body_begin = np.add(starts, BODY_POS, out=o.body_begin)
    body_len = o.body_len
    body_len[:] = header_field(headers, BODY_LEN_POS)
    marks.fail((body_len < 0) | (body_len > total - overhead), Verdict.BODY_LENGTH)
    # Rows already failed read their remaining fields at their own start (in bounds). The usual
    # batch has none, and then skips the masking.
    any_bad = bool(marks.bad.any())
    topic_len_at = body_begin + body_len
    if any_bad:
        topic_len_at = np.where(marks.bad, 0, topic_len_at)
    topic_len = o.topic_len
    topic_len[:] = data[topic_len_at]
    if any_bad:
        topic_len[marks.bad] = 0
    if wide_prefix.any():
        rows = np.flatnonzero(is_v2 & ~marks.bad)
        topic_len[rows] = read_u16(data, topic_len_at[rows], TOPIC_LEN_V2.format)
    topic_begin = np.add(topic_len_at, wide_prefix, out=o.topic_begin)
    topic_begin += TOPIC_LEN_V1.size
    props_len_at = topic_begin + topic_len
    marks.fail(props_len_at + PROPS_LEN.size > ends, Verdict.TOPIC_LENGTH)
    if any_bad or bool(marks.bad.any()):
        props_len_at = np.where(marks.bad, 0, props_len_at)
    props_begin = np.add(props_len_at, PROPS_LEN.size, out=o.props_begin)
    props_len = read_u16(data, props_len_at, PROPS_LEN.format, out=o.props_len)
    marks.fail(props_begin + props_len != ends, Verdict.LENGTHS)
    if next_starts is not None and len(next_starts):
        following = len(next_starts)
        overlap = np.zeros(count, dtype=np.bool_)
        overlap[:following] = ends[:following] > next_starts
        marks.fail(overlap, Verdict.OVERLAP)
    first = marks.first()
    if check_crc and first:
        stored = header_field(headers[:first], BODY_CRC_POS).astype(np.int64)
        source = raw if raw is not None else data
        mismatch = np.zeros(count, dtype=np.bool_)
        mismatch[:first] = body_crcs(source, body_begin[:first], body_len[:first]) != stored
        marks.fail(mismatch, Verdict.BODY_CRC)
    return _spans(marks, data, starts, check_crc, short, total, o)


def _spans(
    marks: _Marks, data: U8, starts: I64, check_crc: bool, short: Bools, total: I64, ranges: RangeColumns
) -> RecordSpans:
    first = marks.first()
    verdict = marks.verdict_of(first) if first < len(starts) else Verdict.OK
    if verdict is not Verdict.OK and short[first] and starts[first] >= 0:
        verdict = check_record(data.data, int(starts[first]), check_crc).verdict
    return RecordSpans(first, verdict, total, ranges)


def with_topic_verdict(spans: RecordSpans, first_bad_topic: int | None) -> RecordSpans:
    """``spans`` with the topic check folded in: a non-UTF-8 topic at a row before the first
    failing record is the first failure (at the same row the earlier checks win)."""
    if first_bad_topic is None or first_bad_topic >= spans.valid:
        return spans
    return spans._replace(valid=first_bad_topic, verdict=Verdict.TOPIC_NOT_UTF8)


def require_records(starts: I64, spans: RecordSpans) -> None:
    """Raise CorruptStore naming the first failing record, if any."""
    if spans.valid < len(starts):
        position = int(starts[spans.valid])
        raise CorruptStore(f"no valid record at slice position {position}: {spans.verdict.reason}")
