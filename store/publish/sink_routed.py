"""The coordinator's half of a sink batch decided across brokers: routes in, chunks out.

The cluster is reached only through :class:`SinkRouter`, which the HTTP door implements over
its cluster view and peer client (``broker.sink_peers``); this module is protocol
only (design: docs/exactly_once.md, "Across brokers"):

* :func:`check_routed` runs before the decision: every row gets its queue from the routes
  just read (:class:`store.publish.sink_plan.QueueAssigner`), and a row whose queue belongs to
  a broker that is down refuses the decision (:class:`OwnerUnavailable`, nothing decided);
* :func:`publish_routed` publishes a decided batch: the chunks of
  :func:`store.publish.sink_plan.routed_chunks` go to their owners, owners in parallel, each
  owner's chunks in order; the coordinator's own chunks go to its :class:`ChunkWriter`. Every
  chunk is acknowledged or the call raises (the first failure by owner name); the decision
  stands either way, and calling it again resumes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from store.publish.sink_chunks import ChunkOutcome, ChunkRef, ChunkWriter
from store.publish.sink_parts import Manifest, OwnerUnavailable, TopicRoute
from store.publish.sink_plan import PlannedChunk, QueueAssigner, first_dead_owner, routed_chunks


class SinkRouter(Protocol):
    """The cluster as a coordinator's publish needs it."""

    @property
    def me(self) -> str:
        """This broker's name."""

    @property
    def serving(self) -> bool:
        """Whether this member writes its name's queues itself: a replica-group member only
        while it is the master; a slave coordinator sends its own name's chunks to its master
        like any other owner's."""

    def routes(self, topics: Sequence[str]) -> Mapping[str, TopicRoute]:
        """The current route of each topic, creating it in the cluster when that is allowed
        (else :class:`store.UnknownTopic`); afterwards this broker's store has every topic it
        owns queues of, with the full queue count. Blocking."""

    def send(self, owner: str, ref: ChunkRef, rows: pa.Table, *, fresh: bool, flush: bool) -> ChunkOutcome:
        """Have ``owner`` store chunk ``ref`` (its :meth:`ChunkWriter.store_chunk`). Raises
        :class:`OwnerUnavailable` when it is down or does not answer. Blocking."""


def part_topics(tables: Sequence[pa.Table]) -> list[str]:
    """The topics of a batch's rows, sorted."""
    found: set[str] = set()
    for table in tables:
        if table.num_rows:
            found.update(t for t in pc.unique(table.column("topic")).to_pylist() if t is not None)
    return sorted(found)


def check_routed(tables: Sequence[pa.Table], routes: Mapping[str, TopicRoute], batch_id: int) -> None:
    """Raise unless every row of the batch has a queue whose owner is alive (before deciding)."""
    assigner = QueueAssigner(routes, batch_id)
    for table in tables:
        if table.num_rows == 0:
            continue
        queue_ids = assigner.assign(table)
        topic_column = table.column("topic")
        for topic in sorted(set(pc.unique(topic_column).to_pylist())):
            mine = queue_ids[pc.equal(topic_column, topic).to_numpy(zero_copy_only=False)]
            dead = first_dead_owner(routes[topic], mine)
            if dead is not None:
                raise OwnerUnavailable(
                    f"broker {dead} owns queues of topic {topic!r} that this batch writes to, and it is "
                    "down: nothing was decided; the commit is retried",
                    broker=dead,
                )


def publish_routed(
    manifest: Manifest,
    tables: Sequence[pa.Table],
    router: SinkRouter,
    writer: ChunkWriter,
    *,
    fresh: bool,
    on_event: Callable[[str], None],
) -> None:
    """Publish a batch decided across brokers (``tables``: its parts in manifest order)."""
    assert manifest.routes is not None
    by_owner: dict[str, list[PlannedChunk]] = {}
    for chunk in routed_chunks(tables, manifest.routes, manifest.batch_id, manifest.chunk_rows):
        by_owner.setdefault(chunk.owner, []).append(chunk)

    def run(owner: str) -> None:
        chunks = by_owner[owner]
        for index, chunk in enumerate(chunks):
            ref = ChunkRef(manifest.sink_id, manifest.batch_id, chunk.seq)
            if owner == router.me and router.serving:  # the coordinator flushes its store when marking
                writer.store_chunk(ref, chunk.rows, fresh=fresh)
            else:
                router.send(owner, ref, chunk.rows, fresh=fresh, flush=index == len(chunks) - 1)
            on_event(f"chunk-{chunk.seq}")

    owners = sorted(by_owner)
    if len(owners) <= 1:
        for owner in owners:
            run(owner)
        return
    with ThreadPoolExecutor(max_workers=len(owners), thread_name_prefix="sink-publish") as pool:
        futures = {owner: pool.submit(run, owner) for owner in owners}
        failures = [(owner, f.exception()) for owner, f in futures.items() if f.exception() is not None]
    if failures:
        _, first = failures[0]
        assert first is not None
        raise first
