"""RecordBatch v2 (magic 2) in and out, over kafka-python's ``kafka.record`` code.

Batch header (61 bytes; CRC-32C covers ``attributes`` to the end)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32 |
    attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64 |
    producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records...

Attributes: bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd), bit 3 timestamp type,
bit 4 transactional, bit 5 control. ``baseOffset`` sits outside the CRC, so a batch built
at offset 0 is stamped with its real base offset by overwriting bytes 0..8 (no CRC rework).
Pure functions on bytes: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from ingest_api.kafka.errors import CorruptBatch, ErrorCode

#: Prefix common to every magic version: baseOffset i64, batchLength i32, leaderEpoch i32, magic i8.
BATCH_PREFIX = struct.Struct(">qiib")
BASE_OFFSET = struct.Struct(">q")
MAGIC_V2 = 2
CODEC_MASK = 0x07
MAX_CODEC_ID = 4  # zstd
NO_SEQUENCE = -1
#: Largest int32 sequence; sequences wrap to 0 after it.
MAX_SEQUENCE = 2**31 - 1

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
    """A validated, decompressed batch from a Produce request."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: tuple[KafkaRecord, ...]
    is_transactional: bool

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + len(self.records) - 1) % (MAX_SEQUENCE + 1)

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id >= 0 and self.base_sequence != NO_SEQUENCE


def decode_batches(data: bytes | None) -> list[ProducedBatch]:
    """Decode every batch of a Produce partition's ``records``.

    Raises :class:`CorruptBatch` with the Kafka error to return: CORRUPT_MESSAGE for a bad
    CRC or structure, INVALID_RECORD for old magic or control batches,
    UNSUPPORTED_COMPRESSION_TYPE for an unknown codec id.
    """
    if not data:
        raise CorruptBatch("produce request carries no records", ErrorCode.INVALID_RECORD)
    raw = bytes(data)
    batches: list[ProducedBatch] = []
    try:
        records = MemoryRecords(raw)
        while records.has_next():
            batches.append(_decode_one(records.next_batch()))
        valid = records.valid_bytes()
    except CorruptBatch:
        raise
    except Exception as exc:  # struct.error / CorruptRecordError on a garbled batch frame
        raise CorruptBatch(f"cannot frame record batches: {exc!r}", ErrorCode.CORRUPT_MESSAGE) from exc
    if not batches or valid != len(raw):
        raise CorruptBatch(
            f"records hold {len(raw) - valid} trailing bytes that are not a whole batch",
            ErrorCode.CORRUPT_MESSAGE,
        )
    return batches


def _decode_one(batch: Any) -> ProducedBatch:
    if not isinstance(batch, DefaultRecordBatch):
        raise CorruptBatch(f"record batch magic {batch.magic} < 2 is not accepted", ErrorCode.INVALID_RECORD)
    if batch.compression_type > MAX_CODEC_ID:
        raise CorruptBatch(
            f"compression codec {batch.compression_type} is unknown", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        )
    if batch.is_control_batch:
        raise CorruptBatch("control batches are not accepted from producers", ErrorCode.INVALID_RECORD)
    if not batch.validate_crc():
        raise CorruptBatch("record batch CRC-32C mismatch", ErrorCode.CORRUPT_MESSAGE)
    try:
        records = tuple(KafkaRecord(rec.timestamp, rec.key, rec.value, tuple(rec.headers)) for rec in batch)
    except Exception as exc:  # kafka.record raises CorruptRecordError, codec errors, ValueError
        raise CorruptBatch(f"cannot decode records: {exc!r}", ErrorCode.CORRUPT_MESSAGE) from exc
    if len(records) != batch.records_count:
        raise CorruptBatch("record count does not match the batch header", ErrorCode.CORRUPT_MESSAGE)
    return ProducedBatch(
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        records=records,
        is_transactional=bool(batch.is_transactional),
    )


def encode_batch(base_offset: int, records: Iterable[KafkaRecord], max_bytes: int) -> tuple[bytes, int]:
    """Build one uncompressed v2 batch starting at ``base_offset``.

    Appends records until the next would push the batch past ``max_bytes``; the first record
    is always taken (KIP-74), so a consumer can make progress past an oversized message.
    Returns ``(batch bytes, records written)``; ``(b"", 0)`` when ``records`` is empty.
    """
    builder = MemoryRecordsBuilder(magic=MAGIC_V2, compression_type=0, batch_size=max(max_bytes, 1))
    written = 0
    for record in records:
        if builder.append(record.timestamp_ms, record.key, record.value, list(record.headers)) is None:
            break
        written += 1
    if written == 0:
        return b"", 0
    builder.close()
    buffer = bytearray(builder.buffer())
    BASE_OFFSET.pack_into(buffer, 0, base_offset)
    return bytes(buffer), written
