"""The sink's input columns on the executor side: scheduling columns become the staged row's
timer properties; contradictory or negative scheduling is refused, naming the column."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pytest

from streaming.sink_columns import InvalidSinkColumn, to_part_batch


def batch(**columns: pa.Array) -> pa.RecordBatch:
    n = len(next(iter(columns.values())))
    return pa.RecordBatch.from_pydict({"body": pa.array([b"x"] * n), **columns})


def test_deliver_at_and_delay_ms_become_timer_properties() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    part = to_part_batch(
        batch(
            deliver_at=pa.array([when, None, None], pa.timestamp("us", tz="UTC")),
            delay_ms=pa.array([None, 1500, None], pa.int64()),
            properties=pa.array([None, [("a", "1")], None], pa.map_(pa.string(), pa.string())),
        ),
        "out",
    )
    props = part.column("properties").to_pylist()
    assert props[0] == [("TIMER_DELIVER_MS", str(int(when.timestamp() * 1000)))]
    assert props[1] == [("a", "1"), ("TIMER_DELAY_MS", "1500")]
    assert props[2] is None


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        (
            {"delay_level": pa.array([1, 2], pa.int32()), "delay_ms": pa.array([None, 5], pa.int64())},
            "delay_ms",
        ),
        ({"delay_level": pa.array([0, -1], pa.int32())}, "delay_level"),
        ({"delay_ms": pa.array([5, -5], pa.int64())}, "delay_ms"),
    ],
)
def test_contradictory_or_negative_scheduling_is_refused(columns: dict[str, pa.Array], named: str) -> None:
    with pytest.raises(InvalidSinkColumn) as info:
        to_part_batch(batch(**columns), "out")
    assert info.value.column == named
