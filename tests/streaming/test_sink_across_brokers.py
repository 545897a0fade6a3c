"""The exactly-once sink across brokers, protocol only: three real stores, no HTTP.

The coordinator's :class:`SinkStaging` publishes through a :class:`SinkRouter`; here the router
hands each chunk (through the wire format, an Arrow IPC stream) to the owner store's real
:class:`ChunkWriter`, and can fail sends to an owner to play a broker that is down or killed.
The HTTP transport of the same protocol is tested in test_sink_cluster_http.py; real broker
processes and Spark in test_cluster_sink_spark.py.

A crash is ``MessageStore.abandon()`` (the page-cache state of a kill -9) and a fresh open.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from store import MessageStore, sharding_queue
from store.publish import (
    ChunkOutcome,
    ChunkRef,
    ChunkWriter,
    OwnerUnavailable,
    SinkStaging,
    StagedPart,
    TopicRoute,
)
from store.publish.sink_parts import COMMIT_FILE, batch_dir, new_part_id, part_path, staging_root, write_part
from tests.streaming.eo_helpers import part_batch, small_config, topic_rows

SINK = "q-cluster"
OWNERS = ("b1", "b2", "b3", "b1", "b2", "b3")
NAMES = ("b1", "b2", "b3")


@dataclass
class LocalRouter:
    """The cluster seen by coordinator ``me``: owners' writers by name, brokers marked down,
    and an optional number of successful sends to an owner before it "dies"."""

    me: str
    writers: dict[str, ChunkWriter]
    serving: bool = True
    down: set[str] = field(default_factory=set)
    sends_before_death: dict[str, int] = field(default_factory=dict)
    sent: collections.Counter[str] = field(default_factory=collections.Counter)

    def routes(self, topics: Sequence[str]) -> Mapping[str, TopicRoute]:
        live = [name for name in self.writers if name not in self.down]
        return {topic: TopicRoute.of(OWNERS, live) for topic in topics}

    def send(self, owner: str, ref: ChunkRef, rows: pa.Table, *, fresh: bool, flush: bool) -> ChunkOutcome:
        limit = self.sends_before_death.get(owner)
        if owner in self.down or (limit is not None and self.sent[owner] >= limit):
            raise OwnerUnavailable(f"broker {owner} did not answer", broker=owner)
        self.sent[owner] += 1
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        wire = pa.ipc.open_stream(sink.getvalue()).read_all()
        return self.writers[owner].store_chunk(ref, wire, fresh=fresh, flush=flush)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[dict[str, MessageStore]]:
    opened = {name: _open(tmp_path / name) for name in NAMES}
    yield opened
    for store in opened.values():
        if not store.closed:
            store.close()


def _open(store_dir: Path) -> MessageStore:
    store = MessageStore.open(small_config(store_dir, background_services=False))
    if not store.has_topic("out"):
        store.create_topic("out", len(OWNERS))  # every broker has the routed topic's full queue count
    return store


def _router(stores: dict[str, MessageStore], staging: SinkStaging, **kw: Any) -> LocalRouter:
    writers = {name: ChunkWriter(store) for name, store in stores.items()}
    writers["b1"] = staging.writer  # the coordinator stores its own chunks with its writer
    return LocalRouter("b1", writers, **kw)


def _bodies(lo: int, hi: int) -> list[bytes]:
    return [b"row-%06d" % i for i in range(lo, hi)]


def _stage(store_dir: Path, batch_id: int, parts: list[list[bytes]]) -> list[StagedPart]:
    """Parts where even rows carry a sharding key (their body) and odd rows carry neither."""
    staged = []
    for index, bodies in enumerate(parts):
        keys = [b.decode() if int(b[-6:]) % 2 == 0 else None for b in bodies]
        part_id = new_part_id(index, 0)
        rows = write_part(
            part_path(staging_root(store_dir), SINK, batch_id, part_id),
            [part_batch(bodies, sharding_keys=keys)],
        )
        staged.append(StagedPart(part_id, rows))
    return staged


def _placed(stores: Mapping[str, MessageStore]) -> dict[bytes, tuple[str, int, str]]:
    """body -> (broker, queue, UNIQ_KEY), asserting no body and no UNIQ_KEY is stored twice."""
    placed: dict[bytes, tuple[str, int, str]] = {}
    uniq_seen: set[str] = set()
    for name, store in stores.items():
        for row in topic_rows(store, "out"):
            body = bytes(row["body"])
            assert body not in placed, f"{body!r} stored twice ({placed.get(body)} and {name})"
            assert row["uniq_key"] not in uniq_seen
            uniq_seen.add(row["uniq_key"])
            placed[body] = (name, row["queue_id"], row["uniq_key"])
    return placed


def _check(stores: Mapping[str, MessageStore], expected: list[bytes]) -> None:
    """Every row exactly once, on the broker owning its queue; keyed rows on their key's queue."""
    placed = _placed(stores)
    assert sorted(placed) == sorted(expected)
    for body, (broker, queue, _) in placed.items():
        assert OWNERS[queue] == broker
        if int(body[-6:]) % 2 == 0:
            assert queue == sharding_queue(body.decode(), len(OWNERS))


def test_rows_are_stored_once_by_the_owner_of_their_queue(
    stores: dict[str, MessageStore], tmp_path: Path
) -> None:
    staging = SinkStaging(stores["b1"], chunk_rows=7)
    router = _router(stores, staging)
    outcome = staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [_bodies(0, 40), _bodies(40, 61)]), router)
    assert (outcome.rows, outcome.decided_now) == (61, True)
    _check(stores, _bodies(0, 61))
    unkeyed = collections.Counter(q for b, (_, q, _) in _placed(stores).items() if int(b[-6:]) % 2)
    assert set(unkeyed) == set(range(6)) and max(unkeyed.values()) - min(unkeyed.values()) <= 1
    assert set(router.sent) == {"b2", "b3"}, "the coordinator's own chunks do not go over the wire"
    replay = staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [_bodies(0, 61)]), router)
    assert replay.already_published
    _check(stores, _bodies(0, 61))


def test_a_coordinator_that_is_a_slave_sends_its_own_names_chunks_to_its_master(
    stores: dict[str, MessageStore], tmp_path: Path
) -> None:
    """The coordinator (the sink's endpoint) became a slave of its replica group after a
    failover: it still stages and decides, but its name's chunks go over the wire to the
    master (here b1's other writer), as it cannot write them itself. (It used to write them
    locally, which a slave refuses: the sink was stuck until it led again.)"""
    staging = SinkStaging(stores["b1"], chunk_rows=7)
    writers = {name: ChunkWriter(store) for name, store in stores.items()}  # b1's: the master's
    router = LocalRouter("b1", writers, serving=False)
    outcome = staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [_bodies(0, 40), _bodies(40, 61)]), router)
    assert (outcome.rows, outcome.decided_now) == (61, True)
    _check(stores, _bodies(0, 61))
    assert set(router.sent) == {"b1", "b2", "b3"}


def test_an_owner_down_before_the_decision_decides_nothing(
    stores: dict[str, MessageStore], tmp_path: Path
) -> None:
    staging = SinkStaging(stores["b1"])
    router = _router(stores, staging, down={"b2"})
    with pytest.raises(OwnerUnavailable, match="broker b2 owns queues") as caught:
        staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [_bodies(0, 30)]), router)
    assert caught.value.broker == "b2"
    assert not (batch_dir(staging.root, SINK, 0) / COMMIT_FILE).exists()
    # rows without keys avoid the broker that is down
    unkeyed = [b for b in _bodies(0, 30) if int(b[-6:]) % 2]
    part_id = new_part_id(0, 1)
    rows = write_part(part_path(staging.root, SINK, 0, part_id), [part_batch(unkeyed)])
    staging.commit(SINK, 0, [StagedPart(part_id, rows)], router)
    assert {broker for broker, _, _ in _placed(stores).values()} == {"b1", "b3"}


def test_an_owner_killed_mid_publish_then_the_replay_resumes(
    stores: dict[str, MessageStore], tmp_path: Path
) -> None:
    """b2 stores two chunks, then "dies" (kill -9: its store abandoned, unflushed); the commit
    fails, the decision stands; the replay (other parts, as after a shuffle) after b2's restart
    publishes the first decision, each owner writing only what it does not have."""
    staging = SinkStaging(stores["b1"], chunk_rows=3)
    router = _router(stores, staging, sends_before_death={"b2": 2})
    with pytest.raises(OwnerUnavailable):
        staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [_bodies(0, 50), _bodies(50, 80)]), router)
    assert staging.pending(SINK) == [0]
    assert len(topic_rows(stores["b2"], "out")) == 6
    stores["b2"].abandon()
    stores["b2"] = _open(tmp_path / "b2")
    router = _router(stores, staging)
    replay = staging.commit(SINK, 0, _stage(tmp_path / "b1", 0, [list(reversed(_bodies(0, 80)))]), router)
    assert (replay.decided_now, replay.rows) == (False, 80)
    _check(stores, _bodies(0, 80))
    assert staging.pending(SINK) == []


def test_a_torn_chunk_at_an_owner_is_completed(stores: dict[str, MessageStore], tmp_path: Path) -> None:
    """A crash mid-append leaves a prefix of a chunk; the resume finds it through the owner's
    key index and appends only the rest."""
    staging = SinkStaging(stores["b1"], chunk_rows=10)
    router = _router(stores, staging, down={"b3"}, sends_before_death={"b2": 0})
    staged = _stage(tmp_path / "b1", 0, [[b for b in _bodies(0, 40) if int(b[-6:]) % 2]])  # unkeyed only
    with pytest.raises(OwnerUnavailable):
        staging.commit(SINK, 0, staged, router)  # decided over b1 and b2 (b3 was down)
    from store.publish.sink_parts import Manifest, read_part
    from store.publish.sink_plan import routed_chunks

    manifest = Manifest.load(batch_dir(staging.root, SINK, 0) / COMMIT_FILE)
    tables = [read_part(part_path(staging.root, SINK, 0, p.part_id)) for p in manifest.parts]
    assert manifest.routes is not None
    first_b2 = next(c for c in routed_chunks(tables, manifest.routes, 0, 10) if c.owner == "b2")
    torn = first_b2.rows.slice(0, 3)
    ChunkWriter(stores["b2"]).put(
        "out", torn, ChunkRef(SINK, 0, first_b2.seq).producer, check=False, delayed=False
    )
    router = _router(stores, staging)
    staging.commit(SINK, 0, [], router)
    placed = _placed(stores)
    assert sorted(placed) == sorted(b for b in _bodies(0, 40) if int(b[-6:]) % 2)
    assert {broker for broker, _, _ in placed.values()} == {"b1", "b2"}


def test_coordinator_crash_after_the_decision_is_resumed_by_its_recovery(
    stores: dict[str, MessageStore], tmp_path: Path
) -> None:
    staging = SinkStaging(stores["b1"], chunk_rows=4)
    router = _router(stores, staging, sends_before_death={"b3": 1})
    with pytest.raises(OwnerUnavailable):
        staging.commit(SINK, 5, _stage(tmp_path / "b1", 5, [_bodies(0, 30)]), router)
    stores["b1"].abandon()
    stores["b1"] = _open(tmp_path / "b1")
    restarted = SinkStaging(stores["b1"], chunk_rows=4)
    assert restarted.recover() == [], "without the cluster a batch decided across brokers waits"
    assert restarted.pending(SINK) == [5]
    outcomes = restarted.recover(_router(stores, restarted))
    assert [(o.batch_id, o.rows) for o in outcomes] == [(5, 30)]
    _check(stores, _bodies(0, 30))
    assert restarted.last_published(SINK) == 5


def test_a_fresh_chunk_is_believed_once(stores: dict[str, MessageStore]) -> None:
    """A late copy of a request that timed out claims to be fresh: the owner checks it anyway."""
    writer = ChunkWriter(stores["b2"])
    rows = pa.Table.from_batches([part_batch(_bodies(0, 5), queue_ids=[1] * 5)])
    ref = ChunkRef(SINK, 9, 4)
    assert writer.store_chunk(ref, rows, fresh=True) == ChunkOutcome(5, 0)
    assert writer.store_chunk(ref, rows, fresh=True) == ChunkOutcome(5, 5)
    assert writer.store_chunk(ref, rows, fresh=False, flush=True) == ChunkOutcome(5, 5)
    assert [bytes(r["body"]) for r in topic_rows(stores["b2"], "out")] == _bodies(0, 5)
    restarted = ChunkWriter(stores["b2"])  # a new process has seen nothing: a resume still checks
    assert restarted.store_chunk(ref, rows, fresh=False) == ChunkOutcome(5, 5)
