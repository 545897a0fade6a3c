"""store.publish.sink_staging without Spark: stage, decide once, publish idempotently, across crashes.

A "crash" is ``MessageStore.abandon()`` (nothing flushed or persisted, ``abort`` left, exactly
the page-cache state of a kill -9) followed by a fresh open and a fresh ``SinkStaging``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import MessageStore
from store.errors import InvalidArgument, StoreNotWritable
from store.publish.sink_parts import (
    COMMIT_FILE,
    SinkStagingError,
    StagedPart,
    batch_dir,
    new_part_id,
    part_path,
    staging_root,
    write_part,
)
from store.publish.sink_staging import SinkStaging, chunk_uniq_keys
from store.write.idempotence import ProducerRef, request_uniq_keys
from tests.streaming.eo_helpers import assert_exactly_once, part_batch, small_config, topic_bodies, topic_rows

SINK = "q-test"


def _open(store_dir: Path) -> MessageStore:
    return MessageStore.open(small_config(store_dir, background_services=False))


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path) -> Iterator[MessageStore]:
    ms = _open(store_dir)
    yield ms
    ms.close()


def _bodies(lo: int, hi: int) -> list[bytes]:
    return [b"row-%06d" % i for i in range(lo, hi)]


def _stage(store_dir: Path, batch_id: int, chunks: list[list[bytes]], topic: str = "out") -> list[StagedPart]:
    """Stage one part per chunk (as write tasks would) and return what they report."""
    root = staging_root(store_dir)
    parts = []
    for index, bodies in enumerate(chunks):
        part_id = new_part_id(index, 0)
        rows = write_part(part_path(root, SINK, batch_id, part_id), [part_batch(bodies, topic)])
        parts.append(StagedPart(part_id, rows))
    return parts


def test_commit_publishes_every_row_once_and_collects_staging(store: MessageStore, store_dir: Path) -> None:
    staging = SinkStaging(store, chunk_rows=7)
    parts = _stage(store_dir, 0, [_bodies(0, 20), _bodies(20, 25), []])
    outcome = staging.commit(SINK, 0, parts)
    assert (outcome.rows, outcome.decided_now, outcome.already_published) == (25, True, False)
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 25))
    assert staging.last_published(SINK) == 0
    assert not batch_dir(staging.root, SINK, 0).exists()
    # Spark replays batch 0 (driver died before its commits log entry): nothing is written again.
    again = staging.commit(SINK, 0, _stage(store_dir, 0, [_bodies(0, 25)]))
    assert again.already_published
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 25))
    assert not batch_dir(staging.root, SINK, 0).exists(), "the replay's parts are collected"


def test_replay_after_decision_keeps_the_first_decision(store: MessageStore, store_dir: Path) -> None:
    """The publish fails after the decision; the replay computes the rows in another order and
    partitioning (a shuffle) - the first decision is published, the replay's parts ignored."""
    staging = SinkStaging(store, chunk_rows=4)
    first = _stage(store_dir, 3, [_bodies(0, 10), _bodies(10, 16)])
    calls = 0
    real_put = store.put_columns

    def failing_put(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise StoreNotWritable("injected: disk full")
        return real_put(*args, **kwargs)

    store.put_columns = failing_put  # type: ignore[method-assign]
    with pytest.raises(StoreNotWritable):
        staging.commit(SINK, 3, first)
    store.put_columns = real_put  # type: ignore[method-assign]
    assert staging.pending(SINK) == [3]
    assert len(topic_bodies(store, "out")) == 8, "two chunks of four were published before the fault"

    shuffled = [list(reversed(_bodies(8, 16))), _bodies(0, 4), _bodies(4, 8), []]
    outcome = staging.commit(SINK, 3, _stage(store_dir, 3, shuffled))
    assert (outcome.decided_now, outcome.rows) == (False, 16)
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 16))
    assert topic_bodies(store, "out") == topic_bodies(store, "out")  # readable twice, same order
    assert staging.pending(SINK) == []


def test_crash_between_decision_and_publish(store_dir: Path) -> None:
    ms = _open(store_dir)
    staging = SinkStaging(ms)
    parts = _stage(store_dir, 0, [_bodies(0, 50), _bodies(50, 100)])
    manifest_dir = batch_dir(staging.root, SINK, 0)
    staging._publish = lambda manifest, resume, **_: (_ for _ in ()).throw(SystemExit("kill -9"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        staging.commit(SINK, 0, parts)
    assert (manifest_dir / COMMIT_FILE).exists()
    ms.abandon()

    ms = _open(store_dir)
    try:
        replay = _stage(store_dir, 0, [_bodies(0, 100)])
        outcome = SinkStaging(ms).commit(SINK, 0, replay)
        assert not outcome.decided_now
        assert_exactly_once(topic_bodies(ms, "out"), _bodies(0, 100))
    finally:
        ms.close()


def test_publish_torn_by_a_crash_inside_a_chunk(store_dir: Path) -> None:
    """Two chunks fully stored and five rows of the third, then kill -9: the replay (or broker
    recovery) finds the stored prefix through the key index and writes only the rest."""
    ms = _open(store_dir)
    staging = SinkStaging(ms, chunk_rows=10)
    parts = _stage(store_dir, 5, [_bodies(0, 35)])
    staging._publish = lambda manifest, resume, **_: None  # type: ignore[method-assign]
    staging._mark_published = lambda sink, batch: None  # type: ignore[method-assign]
    staging.commit(SINK, 5, parts)  # decision only
    producer = f"sink:{SINK}:5"
    for seq, (lo, hi) in enumerate([(0, 10), (10, 20), (20, 25)]):
        keys = request_uniq_keys(ProducerRef(producer, seq), 10)[: hi - lo]
        ms.put_batch("out", _bodies(lo, hi), uniq_keys=keys)
    ms.abandon()

    ms = _open(store_dir)
    try:
        outcomes = SinkStaging(ms, chunk_rows=999).recover()  # chunking comes from the manifest
        assert [(o.batch_id, o.rows) for o in outcomes] == [(5, 35)]
        assert_exactly_once(topic_bodies(ms, "out"), _bodies(0, 35))
        assert SinkStaging(ms).commit(SINK, 5, []).already_published
    finally:
        ms.close()
    ms = _open(store_dir)  # and once more after a clean restart: still exactly once
    try:
        assert_exactly_once(topic_bodies(ms, "out"), _bodies(0, 35))
    finally:
        ms.close()


def test_crash_after_publish_before_marking(store_dir: Path) -> None:
    ms = _open(store_dir)
    staging = SinkStaging(ms, chunk_rows=8)
    staging._mark_published = lambda sink, batch: (_ for _ in ()).throw(SystemExit("kill -9"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        staging.commit(SINK, 0, _stage(store_dir, 0, [_bodies(0, 30)]))
    ms.abandon()
    ms = _open(store_dir)
    try:
        SinkStaging(ms).commit(SINK, 0, _stage(store_dir, 0, [_bodies(0, 30)]))
        assert_exactly_once(topic_bodies(ms, "out"), _bodies(0, 30))
    finally:
        ms.close()


def test_earlier_decided_batch_is_published_first_and_orphans_collected(
    store: MessageStore, store_dir: Path
) -> None:
    staging = SinkStaging(store)
    staging.commit(SINK, 0, _stage(store_dir, 0, [_bodies(0, 5)]))
    orphan = _stage(store_dir, 1, [_bodies(900, 905)])  # a failed attempt's leftovers, never decided
    decided = _stage(store_dir, 2, [_bodies(5, 10)])
    staging._publish = lambda manifest, resume, **_: None  # type: ignore[method-assign]
    staging._mark_published = lambda sink, batch: None  # type: ignore[method-assign]
    staging.commit(SINK, 2, decided)  # decided, not published
    staging = SinkStaging(store)
    assert staging.pending(SINK) == [2]
    staging.commit(SINK, 3, _stage(store_dir, 3, [_bodies(10, 15)]))
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 15))
    assert staging.last_published(SINK) == 3
    assert not part_path(staging.root, SINK, 1, orphan[0].part_id).exists()
    assert sorted(p.name for p in (staging.root / SINK).iterdir()) == ["STATE.json"]


def test_abort_keeps_decided_parts(store: MessageStore, store_dir: Path) -> None:
    staging = SinkStaging(store)
    decided = _stage(store_dir, 0, [_bodies(0, 5)])
    staging._publish = lambda manifest, resume, **_: (_ for _ in ()).throw(StoreNotWritable("x"))  # type: ignore[method-assign]
    with pytest.raises(StoreNotWritable):
        staging.commit(SINK, 0, decided)
    failed = _stage(store_dir, 0, [_bodies(0, 5)])
    removed = staging.abort(SINK, 0, [p.part_id for p in decided + failed])
    assert removed == 1
    assert part_path(staging.root, SINK, 0, decided[0].part_id).exists()
    SinkStaging(store).recover()
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 5))


def test_unpublishable_rows_decide_nothing(store: MessageStore, store_dir: Path) -> None:
    store.create_topic("out", 2)
    root = staging_root(store_dir)
    part_id = new_part_id(0, 0)
    write_part(part_path(root, SINK, 0, part_id), [part_batch([b"a", b"b"], queue_ids=[0, 7])])
    staging = SinkStaging(store)
    with pytest.raises(InvalidArgument, match="queue_id 7"):
        staging.commit(SINK, 0, [StagedPart(part_id, 2)])
    assert not (batch_dir(root, SINK, 0) / COMMIT_FILE).exists()
    with pytest.raises(SinkStagingError, match="missing"):
        staging.commit(SINK, 0, [StagedPart("nope", 1)])
    with pytest.raises(SinkStagingError, match="reported 3"):
        staging.commit(SINK, 0, [StagedPart(part_id, 3)])
    with pytest.raises(InvalidArgument, match="sink id"):
        staging.commit("../etc", 0, [])


def test_columns_reach_the_store(store: MessageStore, store_dir: Path) -> None:
    store.create_topic("out", 4)
    root = staging_root(store_dir)
    batch = part_batch(
        [b"a", b"b", b"c", b"d", b"e"],
        tags=["paid", None, "paid", "x", None],
        keys=["k1 k2", None, "k3", None, None],
        properties=[{"p": "1"}, None, {"p": "2", "q": "z"}, {}, None],
        queue_ids=[3, None, None, None, 1],
        sharding_keys=[None, "order-7", None, None, None],
        delay_levels=[None, None, None, 2, None],
    )
    part_id = new_part_id(0, 0)
    write_part(part_path(root, SINK, 0, part_id), [batch])
    SinkStaging(store).commit(SINK, 0, [StagedPart(part_id, 5)])
    rows = {bytes(r["body"]): r for r in topic_rows(store, "out")}
    assert sorted(rows) == [b"a", b"b", b"c", b"e"], "the delayed row waits in SCHEDULE_TOPIC_XXXX"
    assert (rows[b"a"]["queue_id"], rows[b"a"]["tags"], rows[b"a"]["keys"]) == (3, "paid", ["k1", "k2"])
    assert dict(rows[b"a"]["properties"])["p"] == "1"
    assert {"p": "2", "q": "z"}.items() <= dict(rows[b"c"]["properties"]).items()
    assert rows[b"e"]["queue_id"] == 1
    from store.format.java_hash import java_string_hash

    assert rows[b"b"]["queue_id"] == abs(java_string_hash("order-7")) % 4
    delayed = topic_rows(store, "SCHEDULE_TOPIC_XXXX")
    assert [bytes(r["body"]) for r in delayed] == [b"d"]


def test_state_is_one_small_file_per_sink(store: MessageStore, store_dir: Path) -> None:
    staging = SinkStaging(store)
    for batch_id in range(5):
        staging.commit(SINK, batch_id, _stage(store_dir, batch_id, [_bodies(batch_id * 3, batch_id * 3 + 3)]))
    sink_dir = staging.root / SINK
    assert [p.name for p in sink_dir.iterdir()] == ["STATE.json"]
    assert json.loads((sink_dir / "STATE.json").read_text()) == {"last_published_batch": 4}
    assert_exactly_once(topic_bodies(store, "out"), _bodies(0, 15))


@pytest.mark.parametrize(
    ("producer", "sequence", "count"), [("sink:q-1:7", 0, 70_000), ("x", 2**40, 1), ("y", 3, 0)]
)
def test_vectorised_uniq_keys_equal_the_stores(producer: str, sequence: int, count: int) -> None:
    """Publishing and the store's idempotent produce must agree on every key."""
    ref = ProducerRef(producer, sequence)
    assert chunk_uniq_keys(ref, count) == request_uniq_keys(ref, count)


def test_path_commit_waits_for_a_short_lived_owner_then_names_endpoint(store_dir: Path) -> None:
    import threading

    from streaming.writer import SinkError, open_store_for_commit

    owner = _open(store_dir)
    threading.Timer(0.5, owner.close).start()  # e.g. a source mirroring group offsets
    open_store_for_commit(str(store_dir), wait_s=30).close()
    owner = _open(store_dir)  # e.g. a broker: never lets go
    try:
        with pytest.raises(SinkError, match=r"owned by another process.*option\('endpoint'"):
            open_store_for_commit(str(store_dir), wait_s=0.3)
    finally:
        owner.close()


def test_resume_finds_delayed_rows_in_the_schedule_topic(store_dir: Path) -> None:
    """Delayed rows are stored in SCHEDULE_TOPIC_XXXX (per message); a resume looks them up there."""
    ms = _open(store_dir)
    staging = SinkStaging(ms)
    root = staging_root(store_dir)
    part_id = new_part_id(0, 0)
    bodies = _bodies(0, 6)
    write_part(
        part_path(root, SINK, 0, part_id), [part_batch(bodies, delay_levels=[None, 3, None, 3, 3, None])]
    )
    staging._mark_published = lambda sink, batch: (_ for _ in ()).throw(SystemExit("kill -9"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        staging.commit(SINK, 0, [StagedPart(part_id, 6)])
    ms.abandon()
    ms = _open(store_dir)
    try:
        SinkStaging(ms).commit(SINK, 0, [])
        assert_exactly_once(topic_bodies(ms, "out"), [bodies[0], bodies[2], bodies[5]])
        assert_exactly_once(topic_bodies(ms, "SCHEDULE_TOPIC_XXXX"), [bodies[1], bodies[3], bodies[4]])
    finally:
        ms.close()


def test_resume_finds_timer_rows_parked_or_stored_at_once(store_dir: Path) -> None:
    """Timer rows (TIMER_* properties) are parked in rmq_sys_wheel_timer, or stored in their topic
    when due already; a resume after kill -9 finds both and stores nothing twice."""
    import time

    ms = _open(store_dir)
    staging = SinkStaging(ms)
    root = staging_root(store_dir)
    part_id = new_part_id(0, 0)
    bodies = _bodies(0, 5)
    later = {"TIMER_DELAY_MS": "600000"}
    past = {"TIMER_DELIVER_MS": str(int(time.time() * 1000) - 5000)}
    write_part(
        part_path(root, SINK, 0, part_id),
        [
            part_batch(
                bodies, properties=[None, later, past, later, None], delay_levels=[None, None, None, None, 2]
            )
        ],
    )
    staging._mark_published = lambda sink, batch: (_ for _ in ()).throw(SystemExit("kill -9"))  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        staging.commit(SINK, 0, [StagedPart(part_id, 5)])
    ms.abandon()
    ms = _open(store_dir)
    try:
        SinkStaging(ms).commit(SINK, 0, [])
        assert_exactly_once(topic_bodies(ms, "out"), [bodies[0], bodies[2]])
        assert_exactly_once(topic_bodies(ms, "rmq_sys_wheel_timer"), [bodies[1], bodies[3]])
        assert_exactly_once(topic_bodies(ms, "SCHEDULE_TOPIC_XXXX"), [bodies[4]])
    finally:
        ms.close()


def test_a_timer_beyond_the_max_delay_is_refused_before_deciding(
    store: MessageStore, store_dir: Path
) -> None:
    root = staging_root(store_dir)
    part_id = new_part_id(0, 0)
    too_far = {"TIMER_DELAY_MS": str(4 * 86_400_000)}
    write_part(part_path(root, SINK, 0, part_id), [part_batch([b"a", b"b"], properties=[None, too_far])])
    with pytest.raises(InvalidArgument, match="max delay"):
        SinkStaging(store).commit(SINK, 0, [StagedPart(part_id, 2)])
    assert topic_bodies(store, "out") == []
    assert not (staging_root(store_dir) / SINK / "0" / "COMMIT.json").exists()
