"""How a decided sink batch is cut into chunks, and (across brokers) which queue each row takes.

Pure functions of the decision (:class:`store.publish.sink_parts.Manifest`) and the staged
parts: a resume after any crash recomputes exactly the chunks, UNIQ_KEYs and queues of the
first attempt. Design: docs/exactly_once.md ("Design" and "Across brokers").

* Lone broker (:func:`topic_chunks`): per part, topics sorted, plain rows then delayed ones,
  slices of ``chunk_rows``; the store resolves queues (explicit, sharding key, round robin).
* Across brokers (:func:`routed_chunks`): every row's queue is fixed from the routes the
  decision recorded (:class:`QueueAssigner`), then per part, per topic, plain then delayed, per
  owner (sorted by name), slices of ``chunk_rows``. Chunks are numbered over the whole batch,
  so with every queue on one broker the numbering is the lone broker's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidArgument, UnknownTopic
from store.format.vocabulary import TIMER_REQUEST_PROPERTIES
from store.publish.sink_parts import OwnerUnavailable, TopicRoute
from store.write.routing import sharding_queues


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """Chunk ``seq`` of a batch: rows of one topic (``PART_SCHEMA``) for one owner.

    Across brokers every ``queue_id`` is set and ``sharding_key`` is null (resolved); on a lone
    broker ``owner`` is ``""`` and the rows are as staged."""

    seq: int
    owner: str
    topic: str
    delayed: bool
    rows: pa.Table


def scheduled_rows(rows: pa.Table) -> npt.NDArray[np.bool_]:
    """Rows with a delay level > 0 or a timer property (stored one by one: the store parks them)."""
    delay = rows.column("delay_level")
    out = np.zeros(rows.num_rows, dtype=np.bool_)
    if delay.null_count < len(delay):
        out |= np.asarray(pc.fill_null(pc.greater(delay, 0), False).to_numpy(zero_copy_only=False))
    props = rows.column("properties")
    if props.null_count < len(props):
        merged = props.combine_chunks() if props.num_chunks != 1 else props.chunk(0)
        hit = pc.is_in(merged.keys, value_set=pa.array(TIMER_REQUEST_PROPERTIES)).to_numpy(
            zero_copy_only=False
        )
        seen = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
        offsets = np.asarray(merged.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        out |= (seen[offsets[1:]] - seen[offsets[:-1]]) > 0
    return out


def _topic_groups(table: pa.Table) -> Iterator[tuple[str, pa.Table, bool]]:
    """(topic, rows, delayed): topics sorted, plain rows then delayed ones (row order kept)."""
    if table.num_rows == 0:
        return
    topics = sorted(pc.unique(table.column("topic")).to_pylist())
    for topic in topics:
        rows = table if len(topics) == 1 else table.filter(pc.equal(table.column("topic"), topic))
        scheduled = scheduled_rows(rows)
        if not scheduled.any():
            yield topic, rows, False
            continue
        is_delayed = pa.array(scheduled)
        yield topic, rows.filter(pc.invert(is_delayed)), False
        yield topic, rows.filter(is_delayed), True


def topic_chunks(table: pa.Table, chunk_rows: int) -> Iterator[tuple[str, pa.Table, bool]]:
    """A lone broker's chunks of one part: (topic, rows, delayed) in a deterministic order."""
    for topic, group, delayed in _topic_groups(table):
        for start in range(0, group.num_rows, chunk_rows):
            yield topic, group.slice(start, chunk_rows), delayed


class QueueAssigner:
    """Each row's queue id from the routes of a decision, over the parts of one batch in order.

    Explicit ``queue_id`` first, then ``sharding_key`` (``abs(javaHash) % len(owners)``), then
    the topic's ``spread`` queues in turn, starting at ``batch_id`` (so small batches do not all
    land on one queue). Stateful only through that turn counter, so the parts must be assigned
    in manifest order, every time."""

    def __init__(self, routes: Mapping[str, TopicRoute], batch_id: int) -> None:
        self.routes = routes
        self._turns = dict.fromkeys(routes, batch_id)

    def assign(self, table: pa.Table) -> npt.NDArray[np.int32]:
        """Queue ids of ``table``'s rows (``PART_SCHEMA``). Raises :class:`InvalidArgument` for a
        queue id outside its topic, :class:`UnknownTopic` for a topic without a recorded route
        and :class:`OwnerUnavailable` when unkeyed rows have no live queue to go to."""
        queues = np.full(table.num_rows, -1, dtype=np.int32)
        topic_column = table.column("topic")
        topics = pc.unique(topic_column).to_pylist()
        for topic in sorted(topics):
            route = self.routes.get(topic)
            if route is None:
                raise UnknownTopic(f"topic {topic!r} has no route in the batch's decision")
            mask = (
                np.ones(table.num_rows, dtype=np.bool_)
                if len(topics) == 1
                else np.asarray(pc.equal(topic_column, topic).to_numpy(zero_copy_only=False))
            )
            queues[mask] = self._assign_topic(topic, route, table.filter(pa.array(mask)))
        return queues

    def _assign_topic(self, topic: str, route: TopicRoute, rows: pa.Table) -> npt.NDArray[np.int32]:
        count = len(route.owners)
        explicit = rows.column("queue_id")
        out = np.asarray(pc.fill_null(explicit, -1).to_numpy(zero_copy_only=False), dtype=np.int32).copy()
        bad = out[(out < -1) | (out >= count)]
        if bad.size:
            raise InvalidArgument(f"queue_id {int(bad[0])} is outside topic {topic!r}'s {count} queues")
        keys = rows.column("sharding_key")
        keyed = (out == -1) & np.asarray(pc.is_valid(keys).to_numpy(zero_copy_only=False), dtype=np.bool_)
        if keyed.any():
            values = keys.filter(pa.array(keyed)).to_pylist()
            out[keyed] = sharding_queues(values, count)
        free = np.flatnonzero(out == -1)
        if free.size:
            if not route.spread:
                raise OwnerUnavailable(
                    f"no live broker owns a queue of topic {topic!r} (owners {sorted(set(route.owners))})",
                    broker=route.owners[0],
                )
            turns = self._turns[topic] + np.arange(free.size, dtype=np.int64)
            self._turns[topic] += int(free.size)
            out[free] = np.asarray(route.spread, dtype=np.int32)[turns % len(route.spread)]
        return out


def first_dead_owner(route: TopicRoute, queue_ids: npt.NDArray[np.int32]) -> str | None:
    """The first owner (by name) of ``queue_ids`` that was not alive when ``route`` was read."""
    live = {route.owners[q] for q in route.spread}
    wanted = {route.owners[int(q)] for q in np.unique(queue_ids)}
    dead = sorted(wanted - live)
    return dead[0] if dead else None


def routed_chunks(
    parts: Iterable[pa.Table], routes: Mapping[str, TopicRoute], batch_id: int, chunk_rows: int
) -> Iterator[PlannedChunk]:
    """The chunks of a batch decided across brokers, numbered from 0 (``parts`` in manifest
    order). Each chunk's rows carry their resolved ``queue_id`` and a null ``sharding_key``."""
    assigner = QueueAssigner(routes, batch_id)
    seq = 0
    for table in parts:
        if table.num_rows == 0:
            continue
        resolved = _with_queues(table, assigner.assign(table))
        for topic, group, delayed in _topic_groups(resolved):
            owner_of = np.asarray(routes[topic].owners, dtype=object)
            queue_ids = np.asarray(group.column("queue_id").to_numpy(zero_copy_only=False))
            owners = owner_of[queue_ids]
            for owner in sorted(set(owners.tolist())):
                rows = group if len(set(owners.tolist())) == 1 else group.filter(pa.array(owners == owner))
                for start in range(0, rows.num_rows, chunk_rows):
                    yield PlannedChunk(seq, str(owner), topic, delayed, rows.slice(start, chunk_rows))
                    seq += 1


def _with_queues(table: pa.Table, queue_ids: npt.NDArray[np.int32]) -> pa.Table:
    index = table.schema.get_field_index("queue_id")
    table = table.set_column(index, table.schema.field(index), pa.array(queue_ids, pa.int32()))
    index = table.schema.get_field_index("sharding_key")
    return table.set_column(index, table.schema.field(index), pa.nulls(table.num_rows, pa.string()))
