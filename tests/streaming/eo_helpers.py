"""Helpers of the exactly-once sink tests: part batches, reading a whole topic back, counting.

Not a conftest: imported explicitly by ``test_sink*.py`` / ``test_exactly_once*.py``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from store.sink_staging import PART_SCHEMA


def part_batch(
    bodies: Sequence[bytes],
    topic: str = "out",
    *,
    tags: Sequence[str | None] | None = None,
    keys: Sequence[str | None] | None = None,
    properties: Sequence[dict[str, str] | None] | None = None,
    queue_ids: Sequence[int | None] | None = None,
    sharding_keys: Sequence[str | None] | None = None,
    delay_levels: Sequence[int | None] | None = None,
) -> pa.RecordBatch:
    """A staged-part batch (``PART_SCHEMA``) for ``bodies``; absent columns are all null."""
    n = len(bodies)
    none: list[None] = [None] * n

    def col(values: Sequence[Any] | None) -> Sequence[Any]:
        return none if values is None else values

    props = [None if p is None else list(p.items()) for p in col(properties)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(list(bodies), pa.binary()),
            pa.array(col(tags), pa.string()),
            pa.array(col(keys), pa.string()),
            pa.array(props, PART_SCHEMA.field("properties").type),
            pa.array(col(queue_ids), pa.int32()),
            pa.array(col(sharding_keys), pa.string()),
            pa.array(col(delay_levels), pa.int32()),
        ],
        schema=PART_SCHEMA,
    )


def topic_rows(store: Any, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` (all queues, queue order) as dicts of MESSAGE_SCHEMA fields."""
    rows: list[dict[str, Any]] = []
    if topic not in store.topics() and not topic.startswith("SCHEDULE_TOPIC"):
        return rows
    for queue_id, (lo, hi) in sorted(store.queue_offsets(topic).items()):
        offset = lo
        while offset < hi:
            got = store.read_batch(topic, queue_id, offset, 100_000)
            rows.extend(got.batch.to_pylist())
            if got.next_offset <= offset:
                break
            offset = got.next_offset
    return rows


def topic_bodies(store: Any, topic: str) -> list[bytes]:
    return [bytes(r["body"]) for r in topic_rows(store, topic)]


def reader_bodies(store_dir: Path, topic: str) -> list[bytes]:
    """Bodies of ``topic`` through a lock-free :class:`store.StoreReader` (the store may be open)."""
    from store.reader import StoreReader

    with StoreReader(store_dir) as reader:
        return topic_bodies(reader, topic)


def assert_exactly_once(bodies: Iterable[bytes], expected: Iterable[bytes]) -> None:
    """No duplicate and no loss, with a readable diff when it fails."""
    got = collections.Counter(bodies)
    want = collections.Counter(expected)
    dupes = {b: c for b, c in got.items() if c > 1}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not dupes, f"{len(dupes)} duplicated rows, e.g. {sorted(dupes.items())[:5]}"
    assert not missing, f"{len(missing)} lost rows, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} unexpected rows, e.g. {extra[:5]}"
