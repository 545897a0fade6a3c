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
With a delay wheel (``wheel`` set, :mod:`store.publish.wheel_log`), step 2 first appends the
DELIVER requests due after the moment of the decision (``decided_ms``, kept with the decision)
as "due at T" records in one atomic append (a resumed batch finds them by UNIQ_KEY), hands them
to the wheel, and relocates only the rest at once.

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
from store.publish.relocation_checks import not_relocated_before, stored_prefix
from store.publish.relocation_requests import (
    DECISION_SCHEMA,
    RANGE_FIELDS,
    RELOCATION_SCHEMA,
    check_relocation_table,
    expand_requests,
)
from store.publish.sink_parts import check_id
from store.publish.wheel_log import Scheduled, WheelLog, decisions_of, split_ahead
from store.write.relocator import RelocationPointers

log = logging.getLogger("sparkmq.operators")

OPERATORS_DIR_NAME = "operators"
STATE_FILE = "STATE.json"
DECISION_SUFFIX = ".arrow"
DEFAULT_CHUNK_ROWS = 65_536
_AFTER_KEY = b"after_offset"
_DECIDED_KEY = b"decided_ms"
#: Re-exported: the batch schema lives in :mod:`store.publish.relocation_requests`.
__all__ = [
    "DECISION_SCHEMA", "RANGE_FIELDS", "RELOCATION_SCHEMA", "RelocationLog", "RelocationOutcome",
    "check_relocation_table", "expand_requests",
]  # fmt: skip


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
        #: The delay wheel: requests due later are written as "due at T" records and handed to
        #: ``on_scheduled`` (the broker's wheel). ``None``: everything is published at once.
        self.wheel: WheelLog | None = None
        self.on_scheduled: Callable[[list[Scheduled]], None] = lambda items: None

    def _event(self, name: str) -> None:
        if self._on_event is not None:
            self._on_event(name)

    def _lock(self, operator: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(operator, threading.Lock())

    def exclusive(self, operator: str) -> threading.Lock:
        """The lock ``operator``'s batches are decided and published under. The wheel takes it
        around a checked publish (``WheelLog.exclusive``): a check for records already relocated
        and the append after it are never interleaved with a batch's own."""
        return self._lock(operator)

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
            # Only a writable store decides: a slave (or a replica without a role yet) answered by
            # a job its previous life left running must not keep a decision its master never took.
            self.store.check_writable()
            if batch_id <= self.last_published(operator):
                return RelocationOutcome(operator, batch_id, 0, 0, False, already_published=True)
            for earlier in self._pending(operator):
                if earlier < batch_id:
                    self._publish_decided(operator, earlier)
            path = self._dir(operator) / f"{offset_to_file_name(batch_id)}{DECISION_SUFFIX}"
            decided_now = False
            if not path.exists():
                decided_now = _create_exclusive(
                    path, table, self.store.commitlog_max_offset, self.store.now_ms()
                )
            decided, after, decided_ms = _load_decision(path)
            self._event("decided")
            at_once = self._schedule(operator, batch_id, decided, after, decided_ms, resume=not decided_now)
            appended, due = self._publish(
                operator, expand_requests(self.store, at_once), after, resume=not decided_now
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
        decided, after, decided_ms = _load_decision(path)
        log.info(
            "operator %s: resuming relocation batch %d (%d requests)", operator, batch_id, decided.num_rows
        )
        at_once = self._schedule(operator, batch_id, decided, after, decided_ms, resume=True)
        appended, due = self._publish(operator, expand_requests(self.store, at_once), after, resume=True)
        self._mark_published(operator, batch_id, path)
        return RelocationOutcome(operator, batch_id, decided.num_rows, appended, False, due_ms=due)

    def _schedule(
        self, operator: str, batch_id: int, decided: pa.Table, after: int, decided_ms: int | None,
        *, resume: bool,
    ) -> pa.Table:  # fmt: skip
        """The wheel's part of a decided batch written (once) and handed over; the rest."""
        if self.wheel is None:
            return decided
        at_once, groups = split_ahead(decided, decided_ms)
        if groups:
            written = self.wheel.write(decisions_of(operator, batch_id, groups), after, resume=resume)
            self._event("scheduled")
            if written:
                self.on_scheduled(written)
        return at_once

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
        kept, skipped = not_relocated_before(self.store, pointers, bound, self.chunk_rows)
        if skipped:
            self.skipped_inherited += skipped
            log.warning("relocation: %d record(s) already relocated by an earlier master: skipped", skipped)
        return kept

    def _stored_prefix(self, pointers: RelocationPointers, after: int) -> int:
        return stored_prefix(self.store, pointers, after, self.chunk_rows)

    def _mark_published(self, operator: str, batch_id: int, decision: Path) -> None:
        if self.store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            self.store.flush()  # the decision goes away next: what it wrote must be on disk
        write_json_atomically(self._dir(operator) / STATE_FILE, {"last_published_batch": batch_id})
        decision.unlink(missing_ok=True)


def _create_exclusive(path: Path, table: pa.Table, after_offset: int, decided_ms: int | None = None) -> bool:
    """Write the decision unless it exists. True when this call wrote it."""
    metadata = {_AFTER_KEY: str(after_offset).encode()}
    if decided_ms is not None:
        metadata[_DECIDED_KEY] = str(decided_ms).encode()
    schema = DECISION_SCHEMA.with_metadata(metadata)
    table = check_relocation_table(table)

    def fill(temp: Path) -> None:
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.replace_schema_metadata(schema.metadata))

    return write_atomically(path, fill, exclusive=True)


def _load_decision(path: Path) -> tuple[pa.Table, int, int | None]:
    """``(requests, after_offset, decided_ms)``; ``decided_ms`` None for an earlier version's."""
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    metadata = table.schema.metadata or {}
    after = int(metadata[_AFTER_KEY])
    decided = int(metadata[_DECIDED_KEY]) if _DECIDED_KEY in metadata else None
    return check_relocation_table(table), after, decided  # an earlier version's: no ranges
