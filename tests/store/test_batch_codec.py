"""Batch encoder == per-record encoder byte for byte; patching; UNIQ_KEY generation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import InvalidArgument, MessageTooLarge
from store.format import ids, record_check
from store.format import record as codec
from store.format.batch_encode import BatchColumns, EncodedBatch, encode_columns, patch_be
from store.format.ids import UniqKeyGenerator
from store.format.record import BodyPolicy, RecordFields, encode_record, prepare_body
from store.format.record_check import decode_record
from store.format.record_scan import validate_run

POLICY = BodyPolicy(max_body_bytes=1 << 16, compress_over_bytes=512)
STORE_HOST = ("10.1.2.3", 10911)


def expected_bytes(cols: BatchColumns, policy: BodyPolicy) -> bytes:
    """The batch as the per-record encoder writes it (built here, not by the module)."""

    def at(column: object, i: int) -> int:
        return column if isinstance(column, int) else int(column[i])  # type: ignore[index]

    out = []
    for i, body in enumerate(cols.bodies):
        stored, flags = prepare_body(body, policy)
        props = {}
        for name, column in cols.properties.items():
            value = column if column is None or isinstance(column, str) else column[i]
            if value:
                props[name] = value
        out.append(
            encode_record(
                RecordFields(
                    topic=cols.topic,
                    body=stored,
                    queue_id=at(cols.queue_ids, i),
                    flag=at(cols.flags, i),
                    properties=props,
                    sys_flag=at(cols.sys_flags, i) | flags,
                    born_timestamp_ms=at(cols.born_timestamps_ms, i),
                    born_host=cols.born_host,
                    store_timestamp_ms=cols.store_timestamp_ms,
                    store_host=cols.store_host,
                    reconsume_times=at(cols.reconsume_times, i),
                    prepared_transaction_offset=at(cols.prepared_transaction_offsets, i),
                    queue_offset=at(cols.queue_offsets, i),
                )
            )
        )
    return b"".join(out)


@st.composite
def columns(draw: st.DrawFn) -> BatchColumns:
    n = draw(st.integers(1, 12))
    uniform = draw(st.booleans())
    body_len = draw(st.integers(0, 700))
    if uniform:
        bodies = [draw(st.binary(min_size=body_len, max_size=body_len)) for _ in range(n)]
    else:
        bodies = [draw(st.binary(max_size=700)) for _ in range(n)]
    ints = st.integers(-(2**31), 2**31 - 1)
    longs = st.integers(-(2**63), 2**63 - 1)

    def int_column(values: st.SearchStrategy[int]) -> int | list[int]:
        return draw(values) if draw(st.booleans()) else [draw(values) for _ in range(n)]

    value_len = draw(st.integers(1, 8))
    fixed = st.text(alphabet="abcXYZ019 ", min_size=value_len, max_size=value_len)
    varied = st.one_of(st.none(), st.text(alphabet="ab\u00e9", max_size=6))
    properties: dict[str, str | list[str | None] | None] = {"TAGS": draw(st.sampled_from(["t", "", None]))}
    properties["KEYS"] = [draw(fixed) for _ in range(n)] if uniform else [draw(varied) for _ in range(n)]
    keys = UniqKeyGenerator(clock_ms=lambda: 1_700_000_000_000).next_batch(n)
    properties["UNIQ_KEY"] = list[str | None](keys)
    return BatchColumns(
        topic=draw(st.sampled_from(["t", "orders", "x" * 130])),
        bodies=bodies,
        queue_ids=int_column(ints),
        properties=properties,
        flags=int_column(ints),
        sys_flags=int_column(st.sampled_from([0, 0x4, 0x8])),
        born_timestamps_ms=int_column(longs),
        born_host=("192.168.1.7", 4242),
        store_host=STORE_HOST,
        store_timestamp_ms=draw(longs),
        reconsume_times=int_column(ints),
        prepared_transaction_offsets=int_column(longs),
        queue_offsets=int_column(longs),
    )


@settings(max_examples=150, deadline=None)
@given(columns())
def test_batch_encoder_equals_per_record_encoder(cols: BatchColumns) -> None:
    batch = encode_columns(cols, POLICY)
    assert batch.buffer.tobytes() == expected_bytes(cols, POLICY)
    ends = (batch.starts + batch.sizes).tolist()
    assert batch.starts.tolist() == [0, *ends[:-1]]
    for i in range(len(batch)):
        view = decode_record(batch.record(i))
        assert view.body == cols.bodies[i]


def test_uniform_batch_takes_the_template_path() -> None:
    bodies = [bytes([i % 256]) * 100 for i in range(1000)]
    cols = BatchColumns("orders", bodies, queue_ids=np.arange(1000) % 8, properties={"TAGS": "paid"})
    batch = encode_columns(cols, POLICY)
    assert batch.record_size == len(batch.record(0))
    assert batch.buffer.tobytes() == expected_bytes(cols, POLICY)


@pytest.mark.parametrize(
    "bodies",
    [
        [b"t:h-9-9", b"t:h-10-1", b"t:h-10-3", b"t:k-1"],  # 7, 8, 8, 5: four times the first's length
        [b"x" * 7, b"", b"y" * 14],
    ],
)
def test_bodies_of_other_lengths_summing_to_n_times_the_first_are_not_uniform(bodies: list[bytes]) -> None:
    """A batch whose bodies add up to n times the first one's length is not a uniform batch: the
    template path once cut such bodies at fixed widths under their right CRCs (the Jepsen run's
    slaves refused the records: body CRC mismatch)."""
    cols = BatchColumns("jepsen-out", bodies, queue_ids=1, properties={"TAGS": None})
    batch = encode_columns(cols, POLICY)
    assert batch.record_size is None
    assert batch.buffer.tobytes() == expected_bytes(cols, POLICY)
    for i, body in enumerate(bodies):
        assert decode_record(batch.record(i), check_crc=True).body == body


@pytest.mark.parametrize("record_size", [None, "uniform"])
def test_patching_offsets_and_timestamps(record_size: str | None) -> None:
    records = [encode_record(RecordFields(topic="t", body=b"x" * 10)) for _ in range(5)]
    batch = EncodedBatch.from_records(records)
    if record_size is None:
        batch.record_size = None
    batch.patch_queue_offsets(np.arange(5) + 100)
    batch.patch_physical_offsets(batch.starts + 2**40)
    batch.patch_store_timestamps(1_700_000_000_123)
    for i in range(5):
        view = decode_record(batch.record(i))
        assert (view.queue_offset, view.commitlog_offset) == (100 + i, 2**40 + i * len(records[0]))
        assert view.store_timestamp_ms == 1_700_000_000_123


def test_patch_be_writes_big_endian() -> None:
    buffer = np.zeros(16, dtype=np.uint8)
    patch_be(buffer, np.array([0, 8]), [-1, 0x0102030405060708], 8)
    assert buffer.tobytes().hex() == "ffffffffffffffff0102030405060708"


def test_batch_refuses_before_encoding_anything() -> None:
    with pytest.raises(MessageTooLarge, match="70000 bytes"):
        encode_columns(BatchColumns("t", [b"x", b"y" * 70_000]), POLICY)
    with pytest.raises(InvalidArgument):
        encode_columns(BatchColumns("t", [b"x", b"y"], properties={"KEYS": ["a", "\x02"]}), POLICY)


def test_compressed_bodies_in_a_batch() -> None:
    bodies = [b"a" * 600, b"b" * 10]
    batch = encode_columns(BatchColumns("t", bodies), POLICY)
    assert batch.buffer.tobytes() == expected_bytes(BatchColumns("t", bodies), POLICY)
    assert decode_record(batch.record(0)).sys_flag == 0x301
    assert decode_record(batch.record(0)).body == bodies[0]


# --- UNIQ_KEY -------------------------------------------------------------------------------

MONTH_START = 1_698_796_800_000  # 2023-11-01T00:00:00Z


def test_uniq_key_golden() -> None:
    gen = UniqKeyGenerator("10.0.0.1", pid=0x1234, loader_hash=0xCAFEBABE, clock_ms=lambda: MONTH_START + 5)
    assert gen.next() == "0A0000011234CAFEBABE000000050000"
    assert gen.next() == "0A0000011234CAFEBABE000000050001"
    assert ids.month_start_ms(MONTH_START + 29 * 86_400_000) == MONTH_START


def test_uniq_keys_stay_unique_beyond_65536_per_millisecond() -> None:
    gen = UniqKeyGenerator(clock_ms=lambda: MONTH_START + 1)  # a clock that never moves
    keys = gen.next_batch(70_000) + gen.next_batch(70_000) + [gen.next() for _ in range(10)]
    assert len(set(keys)) == len(keys)
    suffixes = [(int(k[20:28], 16), int(k[28:], 16)) for k in keys]
    assert suffixes == sorted(suffixes)
    assert suffixes[0] == (1, 0)
    assert suffixes[65536] == (2, 0)


def test_uniq_keys_follow_a_moving_clock_and_never_go_back() -> None:
    now = [MONTH_START + 100]
    gen = UniqKeyGenerator(clock_ms=lambda: now[0])
    first = gen.next_batch(3)
    now[0] -= 50  # the wall clock steps back
    second = gen.next_batch(2)
    now[0] += 1000
    third = gen.next()
    suffixes = [(int(k[20:28], 16), int(k[28:], 16)) for k in [*first, *second, third]]
    assert suffixes == [(100, 0), (100, 1), (100, 2), (100, 3), (100, 4), (1050, 0)]


@given(st.integers(1, 300), st.integers(0, 40 * 86_400_000))
def test_uniq_key_round_trip(n: int, since: int) -> None:
    gen = UniqKeyGenerator("10.9.8.7", pid=77, loader_hash=5, clock_ms=lambda: MONTH_START + since)
    for key in gen.next_batch(n):
        ip, pid, loader, _diff, _counter = ids.decode_uniq_key(key)
        assert (ip, pid, loader) == ("10.9.8.7", 77, 5)
        assert key == key.upper()


@pytest.mark.parametrize("queue_ids", [2**31, [0, 2**31]])
def test_out_of_range_fields_are_invalid_arguments(queue_ids: int | list[int]) -> None:
    with pytest.raises(InvalidArgument, match="out of range"):
        encode_columns(BatchColumns("t", [b"x", b"y"], queue_ids=queue_ids), POLICY)
    with pytest.raises(InvalidArgument, match="out of range"):
        encode_record(RecordFields(topic="t", body=b"", queue_id=2**31))


def test_validate_run_stops_at_a_non_utf8_topic_inside_a_stride() -> None:
    records = [encode_record(RecordFields("abc", bytes([i]) * 20, queue_offset=i)) for i in range(10)]
    bad = bytearray(records[6])
    topic_at = codec.BODY_POS + 20 + 1
    bad[topic_at : topic_at + 3] = b"\xff\xfe\xfd"
    buf = b"".join(records[:6]) + bytes(bad) + b"".join(records[7:])
    run = validate_run(buf, check_crc=True)
    assert len(run) == 6
    assert run.end == 6 * len(records[0])
    assert run.starts.tolist() == [i * len(records[0]) for i in range(6)]
    assert run.queue_offsets.tolist() == list(range(6))
    assert [run.topic_names[c] for c in run.topic_codes.tolist()] == ["abc"] * 6
    assert record_check.check_record(buf, run.end, check_crc=True).reason == "topic is not UTF-8"


def test_validate_run_mixed_sizes_and_topics() -> None:
    records = [
        encode_record(RecordFields(topic=t, body=b"x" * n, queue_id=i))
        for i, (t, n) in enumerate([("a", 5), ("a", 5), ("a", 5), ("bb", 1), ("a", 7), ("z" * 200, 0)])
    ]
    buf = b"".join(records) + codec.encode_blank(100)
    run = validate_run(buf, check_crc=False)
    assert len(run) == 6
    assert run.end == sum(map(len, records))
    assert [run.topic_names[c] for c in run.topic_codes.tolist()] == ["a", "a", "a", "bb", "a", "z" * 200]
    assert run.queue_ids.tolist() == list(range(6))
    assert run.sizes.tolist() == [len(r) for r in records]


@pytest.mark.parametrize("bodies", [[b"x", b"y"], [b"x", b"yy"]])  # template path, general path
def test_uniq_keys_are_carried_by_both_paths(bodies: list[bytes]) -> None:
    keys = UniqKeyGenerator().next_batch(2)
    batch = encode_columns(BatchColumns("t", bodies, properties={"UNIQ_KEY": keys}), POLICY)
    assert list(batch.uniq_keys) == keys
    assert [decode_record(batch.record(i)).uniq_key for i in range(2)] == keys


def test_scalar_and_batched_uniq_keys_agree_across_counter_wrap() -> None:
    scalar = UniqKeyGenerator(clock_ms=lambda: 1_763_700_000_000, pid=1, loader_hash=2)
    batched = UniqKeyGenerator(clock_ms=lambda: 1_763_700_000_000, pid=1, loader_hash=2)
    one_by_one = [scalar.next() for _ in range(70_000)]
    assert one_by_one == batched.next_batch(70_000)
    assert len(set(one_by_one)) == 70_000
