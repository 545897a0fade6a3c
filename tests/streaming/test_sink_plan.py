"""store.publish.sink_plan and the decision file: pure functions of the manifest and the parts.

A resume after a crash must recompute exactly the first attempt's queues, chunks and UNIQ_KEYs,
so everything here is deterministic and checked against fixed values (golden bytes for the
``COMMIT.json`` layout, which a later version must still read).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import sharding_queue
from store.errors import InvalidArgument, UnknownTopic
from store.io.atomic_file import write_json_atomically
from store.publish.sink_parts import Manifest, OwnerUnavailable, StagedPart, TopicRoute
from store.publish.sink_plan import QueueAssigner, first_dead_owner, routed_chunks, topic_chunks
from tests.streaming.eo_helpers import part_batch

ROUTE = TopicRoute.of(["b1", "b2", "b3", "b1", "b2", "b3"], ["b1", "b2", "b3"])

#: COMMIT.json of a batch decided across brokers, byte for byte (write_json_atomically's form).
GOLDEN_ROUTED = b"""{
  "batch_id": 7,
  "chunk_rows": 65536,
  "parts": [
    {
      "part_id": "p00000-a0-0-0123456789ab",
      "rows": 3
    }
  ],
  "routes": {
    "out": {
      "owners": [
        "b1",
        "b2"
      ],
      "spread": [
        1
      ]
    }
  },
  "sink_id": "q-1"
}"""

GOLDEN_LONE = b"""{
  "batch_id": 7,
  "chunk_rows": 65536,
  "parts": [
    {
      "part_id": "p00000-a0-0-0123456789ab",
      "rows": 3
    }
  ],
  "sink_id": "q-1"
}"""


def _table(batch: pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([batch])


@pytest.mark.parametrize(
    ("routes", "golden"),
    [({"out": TopicRoute(("b1", "b2"), (1,))}, GOLDEN_ROUTED), (None, GOLDEN_LONE)],
)
def test_decision_file_golden_bytes(
    tmp_path: Path, routes: dict[str, TopicRoute] | None, golden: bytes
) -> None:
    manifest = Manifest("q-1", 7, (StagedPart("p00000-a0-0-0123456789ab", 3),), 65536, routes)
    path = tmp_path / "COMMIT.json"
    write_json_atomically(path, manifest.to_json())
    assert path.read_bytes() == golden
    assert Manifest.load(path) == manifest


def test_topic_route_of_lists_the_live_owners_queues() -> None:
    route = TopicRoute.of(["b1", "b2", "b3", "b1"], ["b3", "b1"])
    assert route == TopicRoute(("b1", "b2", "b3", "b1"), (0, 2, 3))
    assert TopicRoute.from_json(json.loads(json.dumps(route.to_json()))) == route


def test_queues_explicit_then_sharding_key_then_spread_from_the_batch_id() -> None:
    batch = part_batch(
        [b"a", b"b", b"c", b"d", b"e", b"f"],
        queue_ids=[4, None, None, 2, None, None],
        sharding_keys=["k-1", "k-2", None, "ignored", None, None],
    )
    queues = QueueAssigner({"out": ROUTE}, batch_id=3).assign(_table(batch))
    assert queues.tolist() == [4, sharding_queue("k-2", 6), 3, 2, 4, 5]
    # the turn carries over to the next part of the same batch
    assigner = QueueAssigner({"out": ROUTE}, batch_id=5)
    assert assigner.assign(_table(part_batch([b"x", b"y"]))).tolist() == [5, 0]
    assert assigner.assign(_table(part_batch([b"z"]))).tolist() == [1]


def test_spread_skips_owners_that_were_down() -> None:
    route = TopicRoute.of(["b1", "b2", "b3", "b1", "b2", "b3"], ["b1", "b3"])
    queues = QueueAssigner({"out": route}, batch_id=0).assign(_table(part_batch([b"x"] * 8)))
    assert queues.tolist() == [0, 2, 3, 5, 0, 2, 3, 5]
    assert first_dead_owner(route, queues) is None
    assert first_dead_owner(route, np.array([1, 0], dtype=np.int32)) == "b2"


def test_refusals() -> None:
    with pytest.raises(InvalidArgument, match="queue_id 6 is outside topic 'out'"):
        QueueAssigner({"out": ROUTE}, 0).assign(_table(part_batch([b"x"], queue_ids=[6])))
    with pytest.raises(UnknownTopic):
        QueueAssigner({"out": ROUTE}, 0).assign(_table(part_batch([b"x"], topic="other")))
    nobody = TopicRoute.of(["b1", "b2"], [])
    with pytest.raises(OwnerUnavailable):
        QueueAssigner({"out": nobody}, 0).assign(_table(part_batch([b"x"])))


def test_routed_chunks_are_numbered_over_the_batch_per_owner() -> None:
    parts = [
        _table(part_batch([b"p0-%d" % i for i in range(7)], sharding_keys=[f"key-{i}" for i in range(7)])),
        _table(part_batch([b"p1-%d" % i for i in range(5)], delay_levels=[None, 2, None, 2, None])),
    ]
    chunks = list(routed_chunks(parts, {"out": ROUTE}, batch_id=0, chunk_rows=2))
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    owners = np.array(ROUTE.owners)
    for chunk in chunks:
        queue_ids = chunk.rows.column("queue_id").to_pylist()
        assert set(owners[queue_ids]) == {chunk.owner}
        assert chunk.rows.column("sharding_key").null_count == chunk.rows.num_rows
        assert chunk.rows.num_rows <= 2
    first = [c for c in chunks if c.rows.column("body").to_pylist()[0].startswith(b"p0")]
    assert [c.owner for c in first] == sorted(c.owner for c in first), "owners in name order per part"
    delayed = [c for c in chunks if c.delayed]
    assert sorted(b for c in delayed for b in c.rows.column("body").to_pylist()) == [b"p1-1", b"p1-3"]
    every = sorted(b for c in chunks for b in c.rows.column("body").to_pylist())
    assert every == sorted([b"p0-%d" % i for i in range(7)] + [b"p1-%d" % i for i in range(5)])
    again = list(routed_chunks(parts, {"out": ROUTE}, batch_id=0, chunk_rows=2))
    assert [(c.seq, c.owner, c.rows.to_pylist()) for c in again] == [
        (c.seq, c.owner, c.rows.to_pylist()) for c in chunks
    ]


def test_one_owner_numbers_chunks_as_a_lone_broker_does() -> None:
    route = TopicRoute.of(["solo"] * 4, ["solo"])
    parts = [
        _table(part_batch([b"a%d" % i for i in range(5)], delay_levels=[None, 1, None, None, 1])),
        _table(part_batch([b"b%d" % i for i in range(3)])),
    ]
    routed = [
        (c.topic, c.rows.column("body").to_pylist(), c.delayed)
        for c in routed_chunks(parts, {"out": route}, 0, 2)
    ]
    lone = [
        (topic, rows.column("body").to_pylist(), delayed)
        for table in parts
        for topic, rows, delayed in topic_chunks(table, 2)
    ]
    assert routed == lone


@settings(max_examples=60, deadline=None)
@given(
    parts=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["out", "other"]),
                st.one_of(st.none(), st.integers(0, 5)),
                st.one_of(st.none(), st.text("abc", min_size=1, max_size=3)),
                st.one_of(st.none(), st.just(3)),
            ),
            max_size=12,
        ),
        max_size=4,
    ),
    owners=st.lists(st.sampled_from(["b1", "b2", "b3"]), min_size=6, max_size=6),
    batch_id=st.integers(0, 50),
    chunk_rows=st.integers(1, 5),
)
def test_routed_chunks_cover_every_row_once(
    parts: list[list[tuple[str, int | None, str | None, int | None]]],
    owners: list[str],
    batch_id: int,
    chunk_rows: int,
) -> None:
    """Any parts, any route: every row in exactly one chunk, on the owner of its resolved queue
    (explicit, else its key's, else a spread one), chunks numbered 0..K-1, at most chunk_rows of
    one topic and one owner each, and the same chunks when planned again."""
    route = TopicRoute.of(owners, set(owners))
    routes = {"out": route, "other": route}
    tables = []
    expected = {}
    for p, rows in enumerate(parts):
        bodies = [b"%d-%d" % (p, i) for i in range(len(rows))]
        tables.append(
            _table(
                pa.RecordBatch.from_pylist(
                    [
                        {"topic": t, "body": b, "queue_id": q, "sharding_key": k, "delay_level": d}
                        for (t, q, k, d), b in zip(rows, bodies, strict=True)
                    ],
                    schema=part_batch([]).schema,
                )
            )
        )
        for (topic, queue, key, _), body in zip(rows, bodies, strict=True):
            expected[body] = (topic, queue if queue is not None else sharding_queue(key, 6) if key else None)
    chunks = list(routed_chunks(tables, routes, batch_id, chunk_rows))
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    seen = []
    for chunk in chunks:
        assert 0 < chunk.rows.num_rows <= chunk_rows
        for row in chunk.rows.to_pylist():
            topic, queue = expected[row["body"]]
            assert row["topic"] == chunk.topic == topic
            assert owners[row["queue_id"]] == chunk.owner
            assert queue is None or row["queue_id"] == queue
            assert (row["delay_level"] is not None) == chunk.delayed
            seen.append(row["body"])
    assert sorted(seen) == sorted(expected)
    again = list(routed_chunks(tables, routes, batch_id, chunk_rows))
    assert [c.rows.to_pylist() for c in again] == [c.rows.to_pylist() for c in chunks]
