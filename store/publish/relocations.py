"""Exactly-once relocation of parked messages, one decision per (operator, batch).

The broker half of the stateful operators (streaming/operators/): each micro-batch of a
resolver query ends in a list of relocation requests (pointers to parked records, see
:mod:`store.write.relocate`) that ``foreachBatch`` posts here with its batch id::

    <store_dir>/operators/<operator>/STATE.json              {"last_published_batch": N}
    <store_dir>/operators/<operator>/<batch_id:020d>.arrow   the decision (Arrow IPC file)

1. **Decide.** The first call for (operator, batch) writes the requests, with the CommitLog end
   at that moment (``after_offset``), as the decision file with an exclusive create. A replay
   of the batch (the driver died before Spark committed it) finds the decision and ignores its
   own rows: the first decision wins.
2. **Publish.** The requests are relocated in order, in chunks of ``chunk_rows``, each chunk one
   atomic append. The call that decided writes straight through. Any later call (a replay, or
   the broker's start after a crash) *resumes*: it scans the CommitLog from ``after_offset`` for
   the (topic, UNIQ_KEY) of records written since, which are a prefix of the request list
   (chunks are appended in order and a crash tears at most the last), and writes the rest.
   Relocated records keep the producer's UNIQ_KEY, so no derived key can mark them; a record
   with the same topic and UNIQ_KEY written by someone else after the decision would be taken
   for a relocation (a producer re-sending a delayed message's exact UNIQ_KEY; documented).
3. **Mark.** ``STATE.json`` records the batch (atomically), then its decision file is removed.

Requests are ordered and batches are published in order, so per operator at most one decided
batch is ever unpublished.

A request is either one parked record (its CommitLog offset) or a **range** of a delay level's
queue: ``count`` consecutive queue offsets of ``SCHEDULE_TOPIC_XXXX`` queue ``queue_id`` from
``queue_offset``. Level queues are FIFO (a message's due time is its store time plus the level's
delay), so the resolver keeps a few ranges per level and 100 ms bucket instead of a pointer per
message. Publishing expands the ranges through the ConsumeQueue (units never change once written,
so a resumed publish expands them to the same records), then relocates the records in order.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.config import FlushDiskType
from store.errors import InvalidArgument, StoreError
from store.io.atomic_file import write_atomically, write_json_atomically
from store.io.file_names import offset_to_file_name
from store.message_store import MessageStore
from store.names import SCHEDULE_TOPIC
from store.publish.sink_parts import check_id
from store.write.relocate import RelocationKind
from store.write.relocator import RelocationPointers

log = logging.getLogger("sparkmq.operators")

OPERATORS_DIR_NAME = "operators"
STATE_FILE = "STATE.json"
DECISION_SUFFIX = ".arrow"
DEFAULT_CHUNK_ROWS = 65_536
_AFTER_KEY = b"after_offset"

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


@dataclass(frozen=True, slots=True)
class RelocationOutcome:
    operator: str
    batch_id: int
    requests: int
    #: Records appended by this call (a resumed or replayed batch appends fewer or none).
    appended: int
    decided_now: bool
    already_published: bool = False
    #: When each record appended by this call was due (for lateness; a roll or send-back: 0).
    due_ms: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


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


class RelocationLog:
    """Decisions and idempotent publishing of relocation batches for every operator of a store."""

    def __init__(
        self,
        store: MessageStore,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """``on_event(name)`` is called after each step (``decided``, ``chunk-<k>``,
        ``published``): a seam for crash tests."""
        if chunk_rows < 1:
            raise InvalidArgument("chunk_rows must be >= 1")
        self._on_event = on_event
        self.store = store
        self.root = Path(store.config.store_dir) / OPERATORS_DIR_NAME
        self.chunk_rows = chunk_rows
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        #: Records appended per operator since this broker started (for /operators and metrics).
        self.appended_total: Counter[str] = Counter()
        #: A replica that leads after a failover: the CommitLog offset where its leadership began.
        #: Records parked before it may have been relocated already by an earlier master, whose
        #: decisions stayed on its disk; those found in their target topic (by UNIQ_KEY, written
        #: after the parked record) are not relocated again. ``None``: nothing inherited.
        self.inherited_before: Callable[[], int | None] = lambda: None
        #: Requests skipped because an earlier master had relocated them.
        self.skipped_inherited = 0

    def _event(self, name: str) -> None:
        if self._on_event is not None:
            self._on_event(name)

    def _lock(self, operator: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(operator, threading.Lock())

    def _dir(self, operator: str) -> Path:
        return self.root / check_id("operator", operator)

    def last_published(self, operator: str) -> int:
        try:
            doc = json.loads((self._dir(operator) / STATE_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return -1
        return int(doc["last_published_batch"])

    def operators(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def _pending(self, operator: str) -> list[int]:
        directory, last = self._dir(operator), self.last_published(operator)
        if not directory.is_dir():
            return []
        found = (p.name[: -len(DECISION_SUFFIX)] for p in directory.iterdir() if p.suffix == DECISION_SUFFIX)
        return sorted(b for b in (int(n) for n in found if n.isdigit()) if b > last)

    def commit(self, operator: str, batch_id: int, table: pa.Table) -> RelocationOutcome:
        """Decide (once) batch ``batch_id`` of ``operator`` and publish it; idempotent."""
        if batch_id < 0:
            raise InvalidArgument(f"batch id must be >= 0, got {batch_id}")
        table = check_relocation_table(table)
        with self._lock(operator):
            if batch_id <= self.last_published(operator):
                return RelocationOutcome(operator, batch_id, 0, 0, False, already_published=True)
            for earlier in self._pending(operator):
                if earlier < batch_id:
                    self._publish_decided(operator, earlier)
            path = self._dir(operator) / f"{offset_to_file_name(batch_id)}{DECISION_SUFFIX}"
            decided_now = False
            if not path.exists():
                decided_now = _create_exclusive(path, table, self.store.commitlog_max_offset)
            decided, after = _load_decision(path)
            self._event("decided")
            appended, due = self._publish(
                operator, expand_requests(self.store, decided), after, resume=not decided_now
            )
            self._event("published")
            self._mark_published(operator, batch_id, path)
            return RelocationOutcome(operator, batch_id, decided.num_rows, appended, decided_now, due_ms=due)

    def recover(self) -> list[RelocationOutcome]:
        """Publish every decided-but-unpublished batch (run at broker start)."""
        outcomes = []
        for operator in self.operators():
            with self._lock(operator):
                try:
                    for batch_id in self._pending(operator):
                        outcomes.append(self._publish_decided(operator, batch_id))
                except (StoreError, OSError) as exc:
                    log.error("operator %s: could not resume publishing: %s", operator, exc)
        return outcomes

    def _publish_decided(self, operator: str, batch_id: int) -> RelocationOutcome:
        path = self._dir(operator) / f"{offset_to_file_name(batch_id)}{DECISION_SUFFIX}"
        decided, after = _load_decision(path)
        log.info(
            "operator %s: resuming relocation batch %d (%d requests)", operator, batch_id, decided.num_rows
        )
        appended, due = self._publish(operator, expand_requests(self.store, decided), after, resume=True)
        self._mark_published(operator, batch_id, path)
        return RelocationOutcome(operator, batch_id, decided.num_rows, appended, False, due_ms=due)

    def _publish(
        self, operator: str, pointers: RelocationPointers, after: int, *, resume: bool
    ) -> tuple[int, npt.NDArray[np.int64]]:
        """Relocate ``pointers`` from the first not yet written, a chunk per atomic append;
        ``(records appended, when each was due)``."""
        start = self._stored_prefix(pointers, after) if resume else 0
        bound = self.inherited_before()
        if bound:
            pointers = self._not_relocated_before(pointers.rows(start, len(pointers)), bound)
            start = 0
        appended, due = 0, []
        for k, lo in enumerate(range(start, len(pointers), self.chunk_rows)):
            outcome = self.store.relocate_pointers(pointers.rows(lo, lo + self.chunk_rows))
            appended += outcome.appended
            due.append(outcome.due_ms)
            self._event(f"chunk-{k}")
        self.appended_total[operator] += appended
        return appended, np.concatenate(due) if due else np.zeros(0, dtype=np.int64)

    def _not_relocated_before(self, pointers: RelocationPointers, bound: int) -> RelocationPointers:
        """``pointers`` less the records parked before ``bound`` that their target topic already
        holds: a record with the same UNIQ_KEY stored after the parked one (relocated records
        keep the producer's UNIQ_KEY). One key lookup per record parked before the bound."""
        old = np.flatnonzero(pointers.commitlog_offsets < bound)
        if len(old) == 0:
            return pointers
        keep = np.ones(len(pointers), dtype=np.bool_)
        for lo in range(0, len(old), self.chunk_rows):
            rows = old[lo : lo + self.chunk_rows]
            picked = pointers.take(rows)
            built = self.store.relocated_records(picked)
            identities = zip(
                built.rows.tolist(), built.records.topics, built.records.batch.uniq_keys, strict=True
            )
            for row, topic, uniq in identities:
                parked_at = int(picked.commitlog_offsets[row])
                if uniq and any(
                    view.uniq_key == uniq and view.commitlog_offset > parked_at
                    for view in self.store.query_by_key(topic, uniq, max_results=16)
                ):
                    keep[rows[row]] = False
        skipped = int(len(keep) - keep.sum())
        if skipped:
            self.skipped_inherited += skipped
            log.warning("relocation: %d record(s) already relocated by an earlier master: skipped", skipped)
        return pointers.take(np.flatnonzero(keep))

    def _stored_prefix(self, pointers: RelocationPointers, after: int) -> int:
        """How many leading requests are already relocated (written after ``after``)."""
        written = Counter(self.store.stored_identities(after))
        if not written:
            return 0
        for lo in range(0, len(pointers), self.chunk_rows):
            built = self.store.relocated_records(pointers.rows(lo, lo + self.chunk_rows))
            identities = zip(
                built.rows.tolist(), built.records.topics, built.records.batch.uniq_keys, strict=True
            )
            for row, topic, uniq in identities:
                identity = (topic, uniq or None)
                if written[identity] <= 0:
                    return lo + int(row)
                written[identity] -= 1
        return len(pointers)

    def _mark_published(self, operator: str, batch_id: int, decision: Path) -> None:
        if self.store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            self.store.flush()  # the decision goes away next: what it wrote must be on disk
        write_json_atomically(self._dir(operator) / STATE_FILE, {"last_published_batch": batch_id})
        decision.unlink(missing_ok=True)


def _create_exclusive(path: Path, table: pa.Table, after_offset: int) -> bool:
    """Write the decision unless it exists. True when this call wrote it."""
    schema = DECISION_SCHEMA.with_metadata({_AFTER_KEY: str(after_offset).encode()})
    table = check_relocation_table(table)

    def fill(temp: Path) -> None:
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.replace_schema_metadata(schema.metadata))

    return write_atomically(path, fill, exclusive=True)


def _load_decision(path: Path) -> tuple[pa.Table, int]:
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    after = int((table.schema.metadata or {})[_AFTER_KEY])
    return check_relocation_table(table), after  # a decision of an earlier version: no ranges
