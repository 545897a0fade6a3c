"""The columnar produce entry: many messages of one topic as columns, stored all or nothing.

Every door that produces in bulk builds a :class:`ProduceColumns` and calls
``MessageStore.put_columns``: the HTTP door (JSON, NDJSON and Arrow batches), the exactly-once
sink's publish and the Kafka gateway. Arrow tables convert with :meth:`ProduceColumns.from_arrow`,
whose columns are (all but ``body`` optional; a missing column or a null value means unset)::

    body               binary               the body (never null)
    queue_id           int32                the queue; unset: by sharding key, else round robin
    sharding_key       string               abs(hashCode) % queues (store.write.routing)
    tags               string               TAGS
    keys               string | list<string>  KEYS: space-separated tokens, or a token list
    properties         map<string, string>  user properties; TIMER_* ones schedule the message
    uniq_key           string               UNIQ_KEY (unset: generated)
    born_timestamp_ms  int64                unset: now
    delay_level        int32                > 0 parks the message at that delay level
    deliver_at_ms      int64                a timer: TIMER_DELIVER_MS
    delay_ms           int64                a timer: TIMER_DELAY_MS

How it is stored is decided once, here (:func:`put_columns`): queues are resolved (explicit,
then sharding key, then round robin); a batch without scheduled messages and with a modest set
of property names goes through the vectorised ``put_batch`` with no Python object per message;
otherwise through ``put_messages``, one :class:`~store.types.Message` per row, which parks
delayed and timer messages. Both are all or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidArgument, UnknownQueue
from store.format.vocabulary import (
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    TIMER_REQUEST_PROPERTIES,
)
from store.types import Message, PutResult
from store.write.appender import Appender
from store.write.idempotence import ProducerRef
from store.write.results import BatchPutResult
from store.write.routing import sharding_queues
from store.write.transactions import HalfOf

#: Above this many distinct property names a batch goes message by message (columns stop paying).
MAX_PROPERTY_COLUMNS = 64
#: ``queue_ids`` value of a message without an explicit queue.
UNPLACED = -1
#: Arrow timer columns and the property each becomes.
_TIMER_COLUMNS = (("deliver_at_ms", PROPERTY_TIMER_DELIVER_MS), ("delay_ms", PROPERTY_TIMER_DELAY_MS))

PropertyColumns = Mapping[str, Sequence[str | None]]
#: What a columnar put returns: one result object for a batch, or one per message.
ProduceOutcome = BatchPutResult | list[PutResult]


@dataclass(frozen=True, slots=True)
class ProduceColumns:
    """Messages of one topic, one entry per message in every column given (None = not given).

    ``queue_ids`` uses :data:`UNPLACED` for a message without an explicit queue; ``keys`` holds
    each message's KEYS value (space-separated tokens, None for none); ``properties`` maps a
    name to one value per message (None where a message lacks it).
    """

    bodies: Sequence[bytes]
    queue_ids: npt.NDArray[np.int32] | None = None
    sharding_keys: Sequence[str | None] | None = None
    tags: Sequence[str | None] | None = None
    keys: Sequence[str | None] | None = None
    properties: PropertyColumns | None = None
    uniq_keys: Sequence[str | None] | None = None
    born_timestamps_ms: Sequence[int] | npt.NDArray[np.int64] | None = None
    delay_levels: npt.NDArray[np.int32] | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    @classmethod
    def from_arrow(cls, data: pa.Table | pa.RecordBatch) -> ProduceColumns:
        """The columns of an Arrow table or record batch (schema in the module docstring)."""
        n = data.num_rows
        body = _column(data, "body")
        if body is None or body.null_count:
            raise InvalidArgument("a produce table needs a 'body' column without nulls")
        queue_id = _column(data, "queue_id")
        delay = _column(data, "delay_level")
        properties = _pivot_properties(_column(data, "properties"), n)
        for name, prop in _TIMER_COLUMNS:
            timer = _column(data, name)
            if timer is not None:
                properties = dict(properties or {})
                properties[prop] = pc.cast(timer, pa.string()).to_pylist()
        born = _column(data, "born_timestamp_ms")
        if born is not None and born.null_count:
            raise InvalidArgument("born_timestamp_ms must be given for every row or for none")
        return cls(
            bodies=body.to_pylist(),
            queue_ids=None if queue_id is None else _ints(queue_id, UNPLACED).astype(np.int32),
            sharding_keys=_strings(_column(data, "sharding_key")),
            tags=_strings(_column(data, "tags")),
            keys=_joined_keys(_column(data, "keys")),
            properties=properties,
            uniq_keys=_strings(_column(data, "uniq_key")),
            born_timestamps_ms=None if born is None else _ints(born, 0),
            delay_levels=None if delay is None else _ints(delay, 0).astype(np.int32),
        )

    def scheduled(self) -> npt.NDArray[np.bool_]:
        """Which messages the store parks (a delay level > 0 or a timer property)."""
        out = np.zeros(len(self), dtype=np.bool_)
        if self.delay_levels is not None:
            out |= self.delay_levels > 0
        for name in TIMER_REQUEST_PROPERTIES:
            column = (self.properties or {}).get(name)
            if column is not None:
                out |= np.fromiter((v is not None for v in column), dtype=np.bool_, count=len(self))
        return out

    def messages(self, topic: str, queue_ids: npt.NDArray[np.int32] | None) -> list[Message]:
        """One :class:`Message` per row (the path for scheduled messages)."""
        n = len(self)
        props = self.properties or {}
        none: list[None] = [None] * n
        tags, keys, uniq = self.tags or none, self.keys or none, self.uniq_keys or none
        born = none if self.born_timestamps_ms is None else [int(t) for t in self.born_timestamps_ms]
        levels = [0] * n if self.delay_levels is None else self.delay_levels.tolist()
        qids = none if queue_ids is None else queue_ids.tolist()
        return [
            Message(
                topic=topic,
                body=self.bodies[i],
                tags=tags[i],
                keys=tuple((keys[i] or "").split()),
                properties={name: v for name, column in props.items() if (v := column[i]) is not None},
                queue_id=qids[i],
                delay_level=levels[i],
                uniq_key=uniq[i],
                born_timestamp_ms=born[i],
            )
            for i in range(n)
        ]


def resolve_queue_ids(
    topic: str, cols: ProduceColumns, queue_count: int, round_robin: Callable[[int], npt.NDArray[np.int32]]
) -> npt.NDArray[np.int32] | None:
    """Each message's queue: explicit, else its sharding key's, else the next round-robin one.

    None when no message is placed (the appender then goes round robin itself). Raises
    :class:`~store.errors.UnknownQueue` naming the first message with a queue outside the topic."""
    n = len(cols)
    ids = (
        np.full(n, UNPLACED, dtype=np.int32)
        if cols.queue_ids is None
        else np.array(cols.queue_ids, dtype=np.int32, copy=True)
    )
    bad = np.flatnonzero((ids >= queue_count) | (ids < UNPLACED))
    if len(bad):
        row = int(bad[0])
        raise UnknownQueue(
            f"message {row}: queue {int(ids[row])} does not exist: topic {topic!r} has {queue_count} queues"
        )
    if cols.sharding_keys is not None:
        rows = [i for i, key in enumerate(cols.sharding_keys) if key is not None and ids[i] == UNPLACED]
        if rows:
            ids[rows] = sharding_queues([cols.sharding_keys[i] for i in rows], queue_count)  # type: ignore[misc]
    unplaced = np.flatnonzero(ids == UNPLACED)
    if len(unplaced) == n:
        return None
    if len(unplaced):
        ids[unplaced] = round_robin(len(unplaced))
    return ids


def columnar(cols: ProduceColumns) -> bool:
    """Whether ``put_batch`` can take the batch: nothing scheduled, a modest set of properties."""
    return len(cols.properties or {}) <= MAX_PROPERTY_COLUMNS and not cols.scheduled().any()


# -- Arrow column helpers ----------------------------------------------------------------------


def _column(data: pa.Table | pa.RecordBatch, name: str) -> pa.Array | None:
    """A column as one array; None when absent or null everywhere."""
    if name not in data.column_names:
        return None
    column = data.column(name)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if column.null_count == len(column) and len(column):
        return None
    return column


def _strings(column: pa.Array | None) -> list[str | None] | None:
    return None if column is None else column.to_pylist()  # type: ignore[no-any-return]


def _ints(column: pa.Array, fill: int) -> npt.NDArray[np.int64]:
    return np.asarray(pc.fill_null(column, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def _joined_keys(column: pa.Array | None) -> list[str | None] | None:
    """KEYS values: a string column as is, a list column joined with spaces; empty -> None."""
    if column is None:
        return None
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        column = pc.binary_join(column, " ")
    joined = pc.if_else(pc.equal(column, ""), None, column)
    return None if joined.null_count == len(joined) else joined.to_pylist()  # type: ignore[no-any-return]


def _pivot_properties(column: pa.MapArray | None, n: int) -> dict[str, list[str | None]] | None:
    """A map column pivoted into name -> per-message values (None = absent), names in the order
    they first appear."""
    if column is None or len(column.keys) == 0:
        return None
    offsets = np.asarray(column.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = np.diff(offsets)
    lengths[~np.asarray(column.is_valid().to_numpy(zero_copy_only=False))] = 0
    first = int(offsets[0])  # keys/items are not sliced with the array
    names = column.keys.slice(first, int(offsets[-1]) - first).to_pylist()
    values = column.items.slice(first, int(offsets[-1]) - first).to_pylist()
    starts = (offsets[:-1] - first).tolist()
    out: dict[str, list[str | None]] = {}
    for row in np.flatnonzero(lengths).tolist():
        for item in range(starts[row], starts[row] + int(lengths[row])):
            out.setdefault(names[item], [None] * n)[row] = values[item]
    return out or None


def put_columns(
    appender: Appender, topic: str, cols: ProduceColumns, producer: ProducerRef | None
) -> ProduceOutcome:
    """Store ``cols`` through ``put_batch`` when :func:`columnar`, else ``put_messages``."""
    count = appender.producible_queue_count(topic)
    queue_ids = resolve_queue_ids(topic, cols, count, lambda k: appender.round_robin_queues(topic, count, k))
    if not columnar(cols):
        return appender.put_messages(cols.messages(topic, queue_ids), producer=producer)
    return _put_batch(appender, topic, cols, queue_ids, producer)


def put_halves(
    appender: Appender, topic: str, cols: ProduceColumns, half: HalfOf, producer: ProducerRef | None
) -> ProduceOutcome:
    """Store ``cols`` as halves of ``half`` (bound for ``topic``), as :func:`put_columns` would
    store them as messages: through ``put_batch`` when the properties are few, else one
    ``transaction_prepared`` message each. A transactional message cannot be scheduled (RocketMQ's
    client clears DELAY; a timer would deliver a commit late)."""
    if cols.scheduled().any():
        raise InvalidArgument("a transactional message cannot be delayed or timed")
    count = appender.producible_queue_count(topic)
    queue_ids = resolve_queue_ids(topic, cols, count, lambda k: appender.round_robin_queues(topic, count, k))
    if len(cols.properties or {}) > MAX_PROPERTY_COLUMNS:
        marks = half.message_properties()
        messages = [
            replace(m, properties={**m.properties, **marks}, transaction_prepared=True)
            for m in cols.messages(topic, queue_ids)
        ]
        return appender.put_messages(messages, producer=producer)
    return _put_batch(appender, topic, cols, queue_ids, producer, half)


def _put_batch(
    appender: Appender,
    topic: str,
    cols: ProduceColumns,
    queue_ids: npt.NDArray[np.int32] | None,
    producer: ProducerRef | None,
    half: HalfOf | None = None,
) -> BatchPutResult:
    """``cols`` through the appender's vectorised ``put_batch`` (all-None columns left out)."""
    return appender.put_batch(
        topic,
        cols.bodies,
        queue_ids=queue_ids,
        tags=cols.tags if cols.tags is not None and any(t is not None for t in cols.tags) else None,
        keys=cols.keys if cols.keys is not None and any(k is not None for k in cols.keys) else None,
        properties=dict(cols.properties) if cols.properties else None,
        uniq_keys=cols.uniq_keys,
        born_timestamps_ms=cols.born_timestamps_ms,
        producer=producer,
        half=half,
    )
