"""Fetch-side encoding: store Arrow batches -> Kafka record batches."""

from __future__ import annotations

import pyarrow as pa
from kafka.record.memory_records import MemoryRecords

from ingest_api.kafka.handlers.fetch import RecordColumns, columns_from_arrow, encode_columns
from store.format.arrow_schema import MESSAGE_SCHEMA


def _decode(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    return [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers))
        for batch in MemoryRecords(data)
        for r in batch
    ]


def test_gaps_in_offsets_become_separate_batches() -> None:
    columns = RecordColumns([5, 6, 9], [10, 11, 12], [None, b"k", None], [b"a", b"b", b"c"], None)
    data = encode_columns(columns, 1 << 20)
    assert len(list(MemoryRecords(data))) == 2
    assert _decode(data) == [(5, 10, None, b"a", []), (6, 11, b"k", b"b", []), (9, 12, None, b"c", [])]


def test_budget_cuts_between_records_but_never_returns_nothing() -> None:
    columns = RecordColumns(list(range(100)), [0] * 100, [None] * 100, [b"x" * 100] * 100, None)
    # 61-byte batch header + 109 bytes per record (2-byte length + 107-byte body): 8 fit in 1000
    data = encode_columns(columns, 1000)
    assert (len(_decode(data)), len(data)) == (8, 61 + 8 * 109)
    assert len(_decode(encode_columns(columns, 1))) == 1


def _arrow(rows: list[dict[str, object]]) -> pa.RecordBatch:
    full = [
        {
            "topic": "t",
            "queue_id": 0,
            "commitlog_offset": 0,
            "msg_id": "m",
            "uniq_key": "u",
            "tags": None,
            "store_timestamp": 0,
            "reconsume_times": 0,
            **row,
        }
        for row in rows
    ]
    return pa.RecordBatch.from_pylist(full, schema=MESSAGE_SCHEMA)


def test_columns_from_arrow_fast_and_general_paths() -> None:
    plain = _arrow(
        [{"queue_offset": 3, "keys": None, "body": b"v", "properties": [], "born_timestamp": 7_000}]
    )
    columns = columns_from_arrow(plain)
    assert (columns.offsets, columns.timestamps_ms, columns.keys, columns.values, columns.headers) == (
        [3],
        [7],
        [None],
        [b"v"],
        None,
    )
    keyed = _arrow(
        [{"queue_offset": 0, "keys": ["a", "b"], "body": b"v", "properties": None, "born_timestamp": 0}]
    )
    assert columns_from_arrow(keyed).keys == [b"a b"]
    rich = _arrow(
        [
            {
                "queue_offset": 0,
                "keys": None,
                "body": b"",
                "properties": [("h", "1"), ("KAFKA_NULL_VALUE", "1")],
                "born_timestamp": 0,
            }
        ]
    )
    general = columns_from_arrow(rich)
    assert (general.values, general.headers) == ([None], [(("h", b"1"),)])
