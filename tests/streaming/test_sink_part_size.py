"""The sink's remote parts stay under ``partMaxBytes`` as the broker receives them, whatever the
size of the Arrow batches Spark hands the task: a backlog read in one micro-batch came as one
batch larger than the broker's request limit, and its upload was refused (413) again and again.
A real broker (uvicorn in a thread, real store), the executor's staging code without Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from store.publish.sink_parts import PART_SCHEMA, StagedPart, batch_dir, staging_root
from streaming.sink_client import SinkClient
from streaming.sink_columns import parse_sink_options
from streaming.writer import _stage_remote, part_pieces
from tests.streaming.eo_helpers import assert_exactly_once, part_batch, reader_bodies

SINK = "q-size"
MAX_BYTES = 20_000


def _empty_file_bytes() -> int:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, PART_SCHEMA):
        pass
    return len(sink.getvalue())


def test_a_batch_larger_than_a_part_is_cut_into_parts_below_the_limit(
    tmp_path: Path, broker_factory: Any
) -> None:
    store_dir = tmp_path / "store"
    broker = broker_factory(store_dir)
    bodies = [b"b-%06d-" % i + b"x" * 90 for i in range(3_000)]
    # one batch of ~300 KB (15 parts' worth), then small ones that fill parts up
    small = [part_batch(bodies[i : i + 100]) for i in range(2_500, 3_000, 100)]
    batches = [part_batch(bodies[:2_500]), *small]
    assert pa.ipc.get_record_batch_size(batches[0]) > 10 * MAX_BYTES
    options = parse_sink_options({"endpoint": broker.url, "topic": "out", "partMaxBytes": str(MAX_BYTES)})

    parts = _stage_remote(options, SINK, 0, 0, 0, iter(batches))

    staged = sorted(batch_dir(staging_root(store_dir), SINK, 0).glob("*"))
    sizes = [p.stat().st_size for p in staged]
    assert len(parts) == len(staged) >= 15, (len(parts), sizes)
    assert max(sizes) <= MAX_BYTES + _empty_file_bytes(), sizes
    assert sum(rows for _, rows in parts) == len(bodies)
    SinkClient.for_options(options).commit(SINK, 0, [StagedPart(p, rows) for p, rows in parts])
    published = reader_bodies(store_dir, "out")
    assert_exactly_once(published, bodies)


def test_pieces_keep_row_order_and_a_row_larger_than_a_part_stands_alone() -> None:
    batch = part_batch([b"a" * 10, b"b" * 50_000, b"c" * 10, b"d" * 10])
    pieces = list(part_pieces(batch, MAX_BYTES))
    assert [p.column("body").to_pylist() for p, _ in pieces] == [
        [b"a" * 10],
        [b"b" * 50_000],
        [b"c" * 10, b"d" * 10],
    ]
    assert [size for _, size in pieces] == [pa.ipc.get_record_batch_size(p) for p, _ in pieces]
    assert pieces[1][1] > MAX_BYTES  # the broker refuses that one by name; nothing is dropped here
