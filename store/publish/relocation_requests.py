"""What a relocation batch holds: its Arrow schema, its checks, and its ranges expanded.

A request is either one parked record (its CommitLog offset) or a **range** of a delay level's
queue: ``count`` consecutive queue offsets of ``SCHEDULE_TOPIC_XXXX`` queue ``queue_id`` from
``queue_offset`` (see :mod:`store.publish.relocations`). Shared by the batch publish and the
delay wheel (:mod:`store.publish.wheel_log`).
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa

from store.errors import InvalidArgument
from store.message_store import MessageStore
from store.names import SCHEDULE_TOPIC
from store.write.relocate import RelocationKind
from store.write.relocator import RelocationPointers

log = logging.getLogger("sparkmq.operators")

#: What a resolver's batch posts: one row per relocation request, in delivery order.
RELOCATION_SCHEMA = pa.schema(
    [
        pa.field("commitlog_offset", pa.int64(), nullable=False),
        pa.field("kind", pa.int8(), nullable=False),
        pa.field("enqueue_ms", pa.int64(), nullable=False),
        pa.field("dequeue_ms", pa.int64(), nullable=False),
    ]
)
#: Optional columns of a range request (a row without them, or with ``queue_id`` -1, is one
#: record at ``commitlog_offset``): SCHEDULE_TOPIC_XXXX queue ``queue_id``, ``count`` queue
#: offsets from ``queue_offset``.
RANGE_FIELDS = (
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("count", pa.int64(), nullable=False),
)
#: A decision file: the requests with their range columns.
DECISION_SCHEMA = pa.schema([*RELOCATION_SCHEMA, *RANGE_FIELDS])
_RANGE_DEFAULTS = {"queue_id": -1, "queue_offset": -1, "count": 1}


def check_relocation_table(table: pa.Table) -> pa.Table:
    """``table`` cast to :data:`DECISION_SCHEMA` (absent range columns: single records);
    InvalidArgument naming what is wrong."""
    missing = [n for n in RELOCATION_SCHEMA.names if n not in table.column_names]
    if missing:
        raise InvalidArgument(f"relocation batch lacks columns {missing}")
    for name, default in _RANGE_DEFAULTS.items():
        if name not in table.column_names:
            table = table.append_column(name, pa.array(np.full(table.num_rows, default, dtype=np.int64)))
    try:
        cast = table.select(DECISION_SCHEMA.names).cast(DECISION_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise InvalidArgument(f"relocation batch does not match {DECISION_SCHEMA}: {exc}") from exc
    kinds = set(np.unique(cast.column("kind").to_numpy()).tolist())
    if not kinds <= {k.value for k in RelocationKind}:
        raise InvalidArgument(f"unknown relocation kind in {sorted(kinds)}")
    ranges = cast.column("queue_id").to_numpy() >= 0
    if bool(ranges.any()):
        counts = cast.column("count").to_numpy()[ranges]
        if int(counts.min()) < 1 or int(cast.column("queue_offset").to_numpy()[ranges].min()) < 0:
            raise InvalidArgument("a range request needs queue_offset >= 0 and count >= 1")
        if bool((cast.column("kind").to_numpy()[ranges] != RelocationKind.DELIVER).any()):
            raise InvalidArgument("only deliveries come as ranges (of delay level queues)")
    return cast


def expand_requests(store: MessageStore, table: pa.Table) -> RelocationPointers:
    """The decision's requests (:data:`DECISION_SCHEMA`), ranges expanded into their records
    through the ConsumeQueue, in order."""
    offsets = table.column("commitlog_offset").to_numpy()
    kinds = table.column("kind").to_numpy()
    enqueue = table.column("enqueue_ms").to_numpy()
    dequeue = table.column("dequeue_ms").to_numpy()
    queue_ids = table.column("queue_id").to_numpy()
    is_range = queue_ids >= 0
    if not bool(is_range.any()):
        return RelocationPointers.of(offsets, kinds, enqueue, dequeue)
    first, counts = table.column("queue_offset").to_numpy(), table.column("count").to_numpy()
    range_rows = np.flatnonzero(is_range)
    bounds = np.unique(np.concatenate(([0, len(offsets)], range_rows, range_rows + 1)))
    found_offsets, found_sizes, found_rows = [], [], []
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if not is_range[lo]:  # a run of single records
            found_offsets.append(offsets[lo:hi])
            found_sizes.append(np.zeros(hi - lo, dtype=np.int64))
            found_rows.append(np.arange(lo, hi, dtype=np.int64))
            continue
        queue, start, count = int(queue_ids[lo]), int(first[lo]), int(counts[lo])
        units, sizes = store.queue_units(SCHEDULE_TOPIC, queue, start, count)
        if len(units) < count:
            log.error(
                "relocation: %d of level queue %d's offsets [%d, %d) are gone (retention?): skipped",
                count - len(units), queue, start, start + count,
            )  # fmt: skip
        found_offsets.append(units)
        found_sizes.append(sizes)
        found_rows.append(np.full(len(units), lo, dtype=np.int64))
    rows = np.concatenate(found_rows)
    return RelocationPointers.of(
        np.concatenate(found_offsets), kinds[rows], enqueue[rows], dequeue[rows], np.concatenate(found_sizes)
    )
