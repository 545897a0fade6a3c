"""RecordBatch v2 decode/encode: codecs, CRC checks, base-offset stamping, golden bytes."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from ingest_api.kafka.errors import CorruptBatch, ErrorCode
from ingest_api.kafka.records import (
    KafkaRecord,
    _decode_plain_records,
    _decode_records,
    decode_batches,
    encode_batch,
)

# One record, key b"k", value b"v", header ("h", b"x"), timestamp 1_700_000_000_000, at offset 0.
GOLDEN_BATCH = bytes.fromhex(
    "0000000000000000"  # baseOffset
    "0000003e"  # batchLength = 62 (bytes after this field)
    "00000000"  # partitionLeaderEpoch
    "02"  # magic
    "{crc}"  # crc32c over attributes..end
    "0000"  # attributes
    "00000000"  # lastOffsetDelta
    "0000018bcfe56800"  # baseTimestamp
    "0000018bcfe56800"  # maxTimestamp
    "ffffffffffffffff"  # producerId
    "ffff"  # producerEpoch
    "ffffffff"  # baseSequence
    "00000001"  # recordCount
    "18"  # record length 12 (zig-zag varint)
    "00"  # attributes
    "00"  # timestampDelta
    "00"  # offsetDelta
    "02"
    "6b"  # key len 1, "k"
    "02"
    "76"  # value len 1, "v"
    "02"  # 1 header
    "02"
    "68"
    "02"
    "78".replace("{crc}", "00000000")  # "h" -> "x"
)


def _with_crc(batch: bytes) -> bytes:
    crc = crc32c.crc32c(batch[21:])
    return batch[:17] + struct.pack(">I", crc) + batch[21:]


def _produce_batch(records: list[KafkaRecord], compression: int = 0, **producer: int) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=1 << 20, **producer)
    for r in records:
        builder.append(r.timestamp_ms, r.key, r.value, list(r.headers))
    builder.close()
    return bytes(builder.buffer())


RECORDS = [
    KafkaRecord(1_700_000_000_000 + i, f"key-{i}".encode(), b"value-%d" % i * 20, (("h", b"\x00\xff"),))
    for i in range(50)
]


def test_golden_batch_encodes_exactly() -> None:
    expected = _with_crc(GOLDEN_BATCH)
    encoded, written = encode_batch(0, [KafkaRecord(1_700_000_000_000, b"k", b"v", (("h", b"x"),))], 1 << 20)
    assert written == 1
    assert encoded == expected


def test_golden_batch_decodes() -> None:
    (batch,) = decode_batches(_with_crc(GOLDEN_BATCH))
    assert batch.records == (KafkaRecord(1_700_000_000_000, b"k", b"v", (("h", b"x"),)),)
    assert not batch.is_idempotent


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips(compression: int) -> None:
    (batch,) = decode_batches(_produce_batch(RECORDS, compression))
    assert batch.records == tuple(RECORDS)


def test_idempotent_batch_fields() -> None:
    raw = _produce_batch(RECORDS[:3], producer_id=7, producer_epoch=1, base_sequence=10)
    (batch,) = decode_batches(raw)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (
        7,
        1,
        10,
        12,
    )
    assert batch.is_idempotent


def test_several_batches_in_one_partition() -> None:
    raw = _produce_batch(RECORDS[:2]) + _produce_batch(RECORDS[2:5], 1)
    assert [len(b.records) for b in decode_batches(raw)] == [2, 3]


def test_bad_crc_is_corrupt_message() -> None:
    raw = bytearray(_produce_batch(RECORDS[:2]))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptBatch) as err:
        decode_batches(bytes(raw))
    assert err.value.error_code == ErrorCode.CORRUPT_MESSAGE


@pytest.mark.parametrize("cut", [1, 10, 40])
def test_truncated_records_are_corrupt(cut: int) -> None:
    raw = _produce_batch(RECORDS[:2])
    with pytest.raises(CorruptBatch):
        decode_batches(raw[:-cut])


def test_garbage_and_empty_records() -> None:
    with pytest.raises(CorruptBatch):
        decode_batches(b"\x00" * 7)
    with pytest.raises(CorruptBatch):
        decode_batches(b"\xff" * 100)
    with pytest.raises(CorruptBatch) as err:
        decode_batches(None)
    assert err.value.error_code == ErrorCode.INVALID_RECORD


def test_encode_stamps_base_offset_without_breaking_crc() -> None:
    data, written = encode_batch(1234, RECORDS, 1 << 20)
    assert written == len(RECORDS)
    (batch,) = list(MemoryRecords(data))
    assert batch.validate_crc()
    assert [r.offset for r in batch] == list(range(1234, 1234 + len(RECORDS)))


def test_encode_respects_budget_but_always_takes_one() -> None:
    data, written = encode_batch(0, RECORDS, 300)
    assert 1 <= written < len(RECORDS)
    assert len(data) <= 300 or written == 1
    big = [KafkaRecord(0, None, b"x" * 5000)]
    data, written = encode_batch(0, big, 100)
    assert written == 1
    assert len(data) > 5000
    assert encode_batch(0, [], 100) == (b"", 0)


record_strategy = st.builds(
    KafkaRecord,
    st.integers(0, 2**41),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.one_of(st.none(), st.binary(max_size=400)),
    st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=150))), max_size=4).map(
        tuple
    ),
)


@settings(max_examples=60, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=20), compression=st.integers(0, 4))
def test_decoder_agrees_with_kafka_python(records: list[KafkaRecord], compression: int) -> None:
    raw = _produce_batch(records, compression)
    (reference,) = list(MemoryRecords(raw))
    expected = tuple(KafkaRecord(r.timestamp, r.key, r.value, tuple(r.headers)) for r in reference)
    (batch,) = decode_batches(raw)
    assert batch.records == expected == tuple(records)


def test_record_structure_is_checked_even_with_a_valid_crc() -> None:
    raw = bytearray(_produce_batch(RECORDS[:2]))
    raw[61] += 2  # first record's length varint: claims one byte more than its fields
    with pytest.raises(CorruptBatch) as err:
        decode_batches(_with_crc(bytes(raw)))
    assert err.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_old_magic_and_control_batches_are_invalid_records() -> None:
    raw = bytearray(_produce_batch(RECORDS[:1]))
    raw[16] = 1
    with pytest.raises(CorruptBatch) as err:
        decode_batches(bytes(raw))
    assert err.value.error_code == ErrorCode.INVALID_RECORD
    control = bytearray(_produce_batch(RECORDS[:1]))
    control[22] |= 0x20  # attributes low byte: control bit
    with pytest.raises(CorruptBatch) as err:
        decode_batches(_with_crc(bytes(control)))
    assert err.value.error_code == ErrorCode.INVALID_RECORD


def test_unknown_codec_is_unsupported_compression() -> None:
    raw = bytearray(_produce_batch(RECORDS[:1]))
    raw[22] |= 0x07
    with pytest.raises(CorruptBatch) as err:
        decode_batches(_with_crc(bytes(raw)))
    assert err.value.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


@settings(max_examples=60, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=20), budget=st.integers(1, 5000))
def test_encoder_agrees_with_kafka_python(records: list[KafkaRecord], budget: int) -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=budget)
    expected = 0
    for r in records:
        if builder.append(r.timestamp_ms, r.key, r.value, list(r.headers)) is None:
            break
        expected += 1
    builder.close()
    reference = bytearray(builder.buffer())
    reference[:8] = (77).to_bytes(8, "big")
    assert encode_batch(77, records, budget) == (bytes(reference), expected)


plain_records = st.lists(
    st.builds(
        KafkaRecord,
        st.integers(1_700_000_000_000, 1_700_000_000_000 + 3_000_000),
        st.none(),
        st.one_of(st.binary(max_size=300), st.binary(min_size=8_190, max_size=8_200), st.none()),
    ),
    min_size=1,
    max_size=70,
)


@settings(max_examples=40, deadline=None)
@given(records=plain_records)
def test_vectorised_decoder_matches_the_reference_loop(records: list[KafkaRecord]) -> None:
    raw = _produce_batch(records)
    body = raw[61:]
    reference = _decode_records(body, len(records), records[0].timestamp_ms)
    fast = _decode_plain_records(body, len(records), records[0].timestamp_ms)
    deltas = [abs(r.timestamp_ms - records[0].timestamp_ms) for r in records]
    if all(r.value is not None and len(r.value) < 8_000 for r in records) and max(deltas) < 1_000_000:
        assert fast is not None  # the shape it exists for
    if fast is not None:
        assert fast == reference
    (batch,) = decode_batches(raw)
    assert batch.records == tuple(records)


def test_vectorised_decoder_declines_what_does_not_add_up() -> None:
    raw = _produce_batch([KafkaRecord(5, None, b"abc"), KafkaRecord(6, None, b"de")])
    body = bytearray(raw[61:])
    assert _decode_plain_records(bytes(body), 2, 5) is not None
    assert _decode_plain_records(bytes(body), 3, 5) is None  # more records claimed than present
    assert _decode_plain_records(bytes(body[:-1]), 2, 5) is None  # truncated
    body[1] = 0x7F  # corrupt the first record's attributes: not checked, still decodes
    assert _decode_plain_records(bytes(body), 2, 5) is not None
    body[-1] = 2  # one header claimed: not the plain shape
    assert _decode_plain_records(bytes(body), 2, 5) is None
