"""RecordBatch v2 (magic 2) in and out: the Produce decoder and the Fetch encoder.

Batch header (61 bytes; CRC-32C covers ``attributes`` to the end)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...

Attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp type,
bit 4 transactional, bit 5 control. ``baseOffset`` and ``partitionLeaderEpoch`` sit outside
the CRC.

Both directions are written here against :data:`BATCH_HEADER` (the hot paths of Produce and
Fetch; kafka-python's per-record objects were 3-5x slower); decompression uses
``kafka.codec``, CRC-32C the ``crc32c`` C extension. Tests check byte-for-byte agreement with
kafka-python's ``kafka.record`` in both directions. Pure functions on bytes: no I/O, no clock.

Length: about 500 lines: the one Kafka wire format with its compressions, decoded and
encoded in the same module so the layout is drawn once.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import crc32c
import numpy as np
import numpy.typing as npt
from kafka.codec import gzip_decode, lz4_decode, snappy_decode, zstd_decode

from ingest_api.kafka.errors import CorruptBatch, ErrorCode

#: The v2 batch header, one field per format character (61 bytes).
BATCH_HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength: bytes after this field
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc: CRC-32C of bytes [CRC_START:]
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
#: baseOffset + batchLength: the part of a batch not counted by batchLength.
LOG_OVERHEAD = 12
MAGIC_OFFSET = 16
CRC_START = 21  # attributes onwards
BASE_OFFSET = struct.Struct(">q")
MAGIC_V2 = 2
CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
NO_SEQUENCE = -1
#: Largest int32 sequence; sequences wrap to 0 after it.
MAX_SEQUENCE = 2**31 - 1
#: Largest varint (10 bytes of 7 bits).
MAX_VARINT_SHIFT = 63

_DECOMPRESS: dict[int, Callable[[bytes], bytes]] = {
    1: gzip_decode,
    2: snappy_decode,
    3: lz4_decode,
    4: zstd_decode,
}

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record as Kafka clients see it; ``timestamp_ms`` is CreateTime."""

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """A validated, decompressed batch from a Produce request, held column by column."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    timestamps_ms: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[Header, ...]]

    def __len__(self) -> int:
        return len(self.values)

    @property
    def records(self) -> tuple[KafkaRecord, ...]:
        return tuple(map(KafkaRecord, self.timestamps_ms, self.keys, self.values, self.headers))

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + len(self) - 1) % (MAX_SEQUENCE + 1)

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id >= 0 and self.base_sequence != NO_SEQUENCE


def decode_batches(data: bytes | None) -> list[ProducedBatch]:
    """Decode every batch of a Produce partition's ``records``.

    Raises :class:`CorruptBatch` with the Kafka error to return: CORRUPT_MESSAGE for a bad
    CRC, length or record structure, INVALID_RECORD for old magic or control batches,
    UNSUPPORTED_COMPRESSION_TYPE for an unknown codec id.
    """
    if not data:
        raise CorruptBatch("produce request carries no records", ErrorCode.INVALID_RECORD)
    raw = bytes(data)
    batches: list[ProducedBatch] = []
    pos = 0
    while pos < len(raw):
        if len(raw) - pos < BATCH_HEADER.size:
            raise CorruptBatch(
                f"{len(raw) - pos} trailing bytes are not a whole batch", ErrorCode.CORRUPT_MESSAGE
            )
        (batch_length,) = struct.unpack_from(">i", raw, pos + 8)
        end = pos + LOG_OVERHEAD + batch_length
        if batch_length < BATCH_HEADER.size - LOG_OVERHEAD or end > len(raw):
            raise CorruptBatch(
                f"batch length {batch_length} does not fit the records", ErrorCode.CORRUPT_MESSAGE
            )
        batches.append(_decode_one(raw[pos:end]))
        pos = end
    return batches


def _decode_one(batch: bytes) -> ProducedBatch:
    (_, _, _, magic, crc, attributes, _, base_ts, _, producer_id, epoch, base_seq, count) = (
        BATCH_HEADER.unpack_from(batch)
    )
    if magic != MAGIC_V2:
        raise CorruptBatch(f"record batch magic {magic} is not accepted (v2 only)", ErrorCode.INVALID_RECORD)
    if attributes & CONTROL_MASK:
        raise CorruptBatch("control batches are not accepted from producers", ErrorCode.INVALID_RECORD)
    if crc32c.crc32c(memoryview(batch)[CRC_START:]) != crc:
        raise CorruptBatch("record batch CRC-32C mismatch", ErrorCode.CORRUPT_MESSAGE)
    codec = attributes & CODEC_MASK
    body = batch[BATCH_HEADER.size :]
    if codec:
        decompress = _DECOMPRESS.get(codec)
        if decompress is None:
            raise CorruptBatch(
                f"compression codec {codec} is unknown", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
            )
        try:
            body = bytes(decompress(body))
        except Exception as exc:  # each codec library raises its own error type
            raise CorruptBatch(
                f"cannot decompress codec {codec}: {exc!r}", ErrorCode.CORRUPT_MESSAGE
            ) from exc
    if count < 0:
        raise CorruptBatch(f"negative record count {count}", ErrorCode.CORRUPT_MESSAGE)
    columns = _decode_plain_records(body, count, base_ts) or _decode_records(body, count, base_ts)
    timestamps, keys, values, headers = columns
    return ProducedBatch(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_seq,
        is_transactional=bool(attributes & TRANSACTIONAL_MASK),
        timestamps_ms=timestamps,
        keys=keys,
        values=values,
        headers=headers,
    )


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint at ``pos`` -> (value, next position)."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result = byte & 0x7F
    shift = 7
    pos += 1
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > MAX_VARINT_SHIFT:
            raise CorruptBatch("varint longer than 10 bytes", ErrorCode.CORRUPT_MESSAGE)


_Columns = tuple[list[int], list[bytes | None], list[bytes | None], list[tuple[Header, ...]]]
#: Widest varint the vectorised path decodes (3 bytes: 21 bits, deltas up to +-17 minutes).
_FAST_VARINT_BYTES = 3
_NULL_KEY_BYTE = 1  # zig-zag -1
_NO_HEADERS_BYTE = 0


def _varints_at(
    buf: npt.NDArray[np.uint8], at: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], ...] | None:
    """Zig-zag varints starting at positions ``at`` -> (values, sizes); None if any is wider
    than :data:`_FAST_VARINT_BYTES` (``buf`` is padded so reads past the end stay inside)."""
    unsigned = np.zeros(len(at), dtype=np.int64)
    sizes = np.zeros(len(at), dtype=np.int64)
    for k in range(_FAST_VARINT_BYTES):
        byte = buf[at + k].astype(np.int64)
        active = sizes == 0
        unsigned |= np.where(active, (byte & 0x7F) << (7 * k), 0)
        sizes[active & (byte < 0x80)] = k + 1
    if not sizes.all():
        return None
    return (unsigned >> 1) ^ -(unsigned & 1), sizes


def _decode_plain_records(data: bytes, count: int, base_ts: int) -> _Columns | None:
    """Vectorised decode of the common shape: null keys, no headers, short varints.

    Only the record-length chain is walked in Python; every other field is read with NumPy
    at known positions. Returns None (the caller then runs :func:`_decode_records`, which
    also reports errors precisely) when any record has another shape or does not add up.
    """
    if count == 0:
        return None
    starts = [0] * count  # where each record's body begins
    ends = [0] * count
    pos = 0
    end = len(data)
    for i in range(count):
        if pos >= end:
            return None
        first = data[pos]
        if first & 1:  # a negative length: let the reference decoder report it
            return None
        if first < 0x80:
            length, pos = first >> 1, pos + 1
        elif pos + 1 < end and data[pos + 1] < 0x80:
            length, pos = ((first & 0x7F) | (data[pos + 1] << 7)) >> 1, pos + 2
        else:
            return None
        starts[i] = pos
        pos += length
        ends[i] = pos
    if pos != end:
        return None
    buf = np.frombuffer(data + bytes(_FAST_VARINT_BYTES), dtype=np.uint8)
    record_end = np.asarray(ends, dtype=np.int64)
    at = np.asarray(starts, dtype=np.int64) + 1  # skip the attributes byte
    if not (at < record_end).all():  # every read below starts inside its record
        return None
    ts = _varints_at(buf, at)
    if ts is None:
        return None
    at += ts[1]
    if not (at < record_end).all():
        return None
    offset_delta = _varints_at(buf, at)
    if offset_delta is None:
        return None
    at += offset_delta[1]
    if not ((at < record_end).all() and (buf[at] == _NULL_KEY_BYTE).all()):
        return None
    at += 1
    if not (at < record_end).all():
        return None
    value_length = _varints_at(buf, at)
    if value_length is None or (value_length[0] < 0).any():
        return None
    value_start = at + value_length[1]
    value_end = value_start + value_length[0]
    if not ((value_end + 1 == record_end).all() and (buf[value_end] == _NO_HEADERS_BYTE).all()):
        return None
    values: list[bytes | None] = [
        data[a:b] for a, b in zip(value_start.tolist(), value_end.tolist(), strict=True)
    ]
    no_headers: tuple[Header, ...] = ()
    return (ts[0] + base_ts).tolist(), [None] * count, values, [no_headers] * count


def _decode_records(
    data: bytes, count: int, base_ts: int
) -> tuple[list[int], list[bytes | None], list[bytes | None], list[tuple[Header, ...]]]:
    """Columns of ``count`` records::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint | key | valueLength varint | value | headerCount varint |
    (headerKeyLength varint | headerKey utf8 | headerValueLength varint | headerValue)*
    """
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple[Header, ...]] = []
    varint = _varint
    no_headers: tuple[Header, ...] = ()
    pos = 0
    # Hot loop (about 2/3 of a produce's CPU): one- and two-byte varints, which cover record
    # lengths, offset deltas and value lengths up to 8 KiB, are decoded inline.
    try:
        for _ in range(count):
            first = data[pos]
            if first < 0x80:
                length = (first >> 1) ^ -(first & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                length = ((first & 0x7F) | (data[pos + 1] << 7)) >> 1
                pos += 2
            else:
                length, pos = varint(data, pos)
            start = pos
            first = data[pos + 1]  # data[pos]: the unused attributes byte
            if first < 0x80:
                ts_delta = (first >> 1) ^ -(first & 1)
                pos += 2
            else:
                ts_delta, pos = varint(data, pos + 1)
            if data[pos] < 0x80:  # offset delta: records are contiguous by position
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                _, pos = varint(data, pos)
            if data[pos] == 1:  # zig-zag -1: null key
                keys.append(None)
                pos += 1
            else:
                size, pos = varint(data, pos)
                keys.append(data[pos : pos + size] if size >= 0 else None)
                pos += max(size, 0)
            first = data[pos]
            if first < 0x80 and not first & 1:
                size = first >> 1
                pos += 1
            elif first >= 0x80 and data[pos + 1] < 0x80 and not first & 1:
                size = ((first & 0x7F) | (data[pos + 1] << 7)) >> 1
                pos += 2
            else:
                size, pos = varint(data, pos)
            if size >= 0:
                values.append(data[pos : pos + size])
                pos += size
            else:
                values.append(None)
            if data[pos] == 0:
                headers.append(no_headers)
                pos += 1
            else:
                header_count, pos = varint(data, pos)
                record_headers, pos = _decode_headers(data, pos, header_count)
                headers.append(record_headers)
            if pos - start != length or pos > len(data):
                raise CorruptBatch(
                    f"record length {length} does not match its fields", ErrorCode.CORRUPT_MESSAGE
                )
            timestamps.append(base_ts + ts_delta)
    except (IndexError, UnicodeDecodeError) as exc:
        raise CorruptBatch(f"truncated or invalid record: {exc!r}", ErrorCode.CORRUPT_MESSAGE) from exc
    if pos != len(data):
        raise CorruptBatch(f"{len(data) - pos} bytes after the last record", ErrorCode.CORRUPT_MESSAGE)
    return timestamps, keys, values, headers


def _decode_headers(data: bytes, pos: int, count: int) -> tuple[tuple[Header, ...], int]:
    if count < 0:
        raise CorruptBatch(f"negative header count {count}", ErrorCode.CORRUPT_MESSAGE)
    result: list[Header] = []
    for _ in range(count):
        size, pos = _varint(data, pos)
        if size < 0:
            raise CorruptBatch("null header key", ErrorCode.CORRUPT_MESSAGE)
        name = data[pos : pos + size].decode("utf-8")
        pos += size
        size, pos = _varint(data, pos)
        if size >= 0:
            result.append((name, data[pos : pos + size]))
            pos += size
        else:
            result.append((name, None))
    return tuple(result), pos


def _zigzag(value: int) -> bytes:
    """Zig-zag varint encoding of a signed 64-bit ``value``."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


#: Pre-encoded varints for small non-negative values (lengths, deltas, counts).
_SMALL_VARINTS = [_zigzag(n) for n in range(1 << 14)]
_NULL_LENGTH = _zigzag(-1)


def _varint_bytes(value: int) -> bytes:
    if 0 <= value < len(_SMALL_VARINTS):
        return _SMALL_VARINTS[value]
    return _zigzag(value)


def _header_bytes(headers: tuple[Header, ...]) -> bytes:
    parts = [_varint_bytes(len(headers))]
    for name, value in headers:
        encoded = name.encode("utf-8")
        parts += (_varint_bytes(len(encoded)), encoded)
        parts += (_NULL_LENGTH,) if value is None else (_varint_bytes(len(value)), value)
    return b"".join(parts)


def encode_records(
    base_offset: int,
    timestamps_ms: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    headers: list[tuple[Header, ...]] | None,
    max_bytes: int,
) -> tuple[bytes, int]:
    """One uncompressed v2 batch of consecutive records starting at ``base_offset``.

    Columns in, bytes out (same wire bytes as kafka-python's builder). Records are added
    while the batch stays within ``max_bytes``; the first is always taken (KIP-74) so a
    consumer can get past an oversized message. Returns ``(batch, records written)``.
    """
    if not values:
        return b"", 0
    first_ts = timestamps_ms[0]
    max_ts = first_ts
    size = BATCH_HEADER.size
    parts: list[bytes] = []
    varint = _varint_bytes
    no_headers = b"\x00"
    for index, value in enumerate(values):
        ts = timestamps_ms[index]
        key = keys[index]
        record_headers = headers[index] if headers is not None else ()
        body = b"".join(
            (
                b"\x00",  # attributes
                varint(ts - first_ts),
                varint(index),
                _NULL_LENGTH if key is None else varint(len(key)) + key,
                _NULL_LENGTH if value is None else varint(len(value)) + value,
                _header_bytes(record_headers) if record_headers else no_headers,
            )
        )
        length = varint(len(body))
        if index and size + len(length) + len(body) > max_bytes:
            break
        parts += (length, body)
        size += len(length) + len(body)
        max_ts = max(max_ts, ts)
    written = len(parts) // 2
    records = b"".join(parts)
    tail = BATCH_HEADER.pack(
        base_offset,
        size - LOG_OVERHEAD,
        0,
        MAGIC_V2,
        0,
        0,
        written - 1,
        first_ts,
        max_ts,
        -1,
        -1,
        -1,
        written,
    )
    crc = crc32c.crc32c(tail[CRC_START:] + records)
    header = tail[:17] + struct.pack(">I", crc) + tail[CRC_START:]
    return header + records, written


def encode_batch(base_offset: int, records: Iterable[KafkaRecord], max_bytes: int) -> tuple[bytes, int]:
    """:func:`encode_records` for record objects."""
    items = list(records)
    return encode_records(
        base_offset,
        [r.timestamp_ms for r in items],
        [r.key for r in items],
        [r.value for r in items],
        [r.headers for r in items],
        max_bytes,
    )
