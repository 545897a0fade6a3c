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
"""

from __future__ import annotations

import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from store.config import FlushDiskType
from store.errors import InvalidArgument, StoreError
from store.io.atomic_file import write_atomically, write_json_atomically
from store.io.file_names import offset_to_file_name
from store.message_store import MessageStore
from store.publish.sink_parts import check_id
from store.write.relocate import Relocation, RelocationKind, relocated_record

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


@dataclass(frozen=True, slots=True)
class RelocationOutcome:
    operator: str
    batch_id: int
    requests: int
    #: Records appended by this call (a resumed or replayed batch appends fewer or none).
    appended: int
    decided_now: bool
    already_published: bool = False


def requests_of(table: pa.Table) -> list[Relocation]:
    """The relocation requests of a decision table (:data:`RELOCATION_SCHEMA`)."""
    cols = [table.column(name).to_pylist() for name in RELOCATION_SCHEMA.names]
    return [
        Relocation(int(off), RelocationKind(int(kind)), int(enq), int(deq))
        for off, kind, enq, deq in zip(*cols, strict=True)
    ]


def check_relocation_table(table: pa.Table) -> pa.Table:
    """``table`` cast to :data:`RELOCATION_SCHEMA`; InvalidArgument naming what is wrong."""
    missing = [n for n in RELOCATION_SCHEMA.names if n not in table.column_names]
    if missing:
        raise InvalidArgument(f"relocation batch lacks columns {missing}")
    try:
        cast = table.select(RELOCATION_SCHEMA.names).cast(RELOCATION_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
        raise InvalidArgument(f"relocation batch does not match {RELOCATION_SCHEMA}: {exc}") from exc
    kinds = set(cast.column("kind").to_pylist())
    if not kinds <= {k.value for k in RelocationKind}:
        raise InvalidArgument(f"unknown relocation kind in {sorted(kinds)}")
    return cast


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
            appended = self._publish(operator, requests_of(decided), after, resume=not decided_now)
            self._event("published")
            self._mark_published(operator, batch_id, path)
            return RelocationOutcome(operator, batch_id, decided.num_rows, appended, decided_now)

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
        appended = self._publish(operator, requests_of(decided), after, resume=True)
        self._mark_published(operator, batch_id, path)
        return RelocationOutcome(operator, batch_id, decided.num_rows, appended, False)

    def _publish(self, operator: str, requests: Sequence[Relocation], after: int, *, resume: bool) -> int:
        start = self._stored_prefix(requests, after) if resume else 0
        appended = 0
        for k, lo in enumerate(range(start, len(requests), self.chunk_rows)):
            results = self.store.relocate(requests[lo : lo + self.chunk_rows])
            appended += sum(r is not None for r in results)
            self._event(f"chunk-{k}")
        self.appended_total[operator] += appended
        return appended

    def _stored_prefix(self, requests: Sequence[Relocation], after: int) -> int:
        """How many leading requests are already relocated (written after ``after``)."""
        written = Counter(self.store.stored_identities(after))
        if not written:
            return 0
        for i, req in enumerate(requests):
            raw = self.store.read_record(req.commitlog_offset)
            if raw is None:
                continue  # gone: relocate() skips it too
            rec = relocated_record(raw, req.kind, enqueue_ms=req.enqueue_ms, dequeue_ms=req.dequeue_ms)
            if rec is None:
                continue
            identity = (rec.topic, (rec.properties or {}).get("UNIQ_KEY"))
            if written[identity] <= 0:
                return i
            written[identity] -= 1
        return len(requests)

    def _mark_published(self, operator: str, batch_id: int, decision: Path) -> None:
        if self.store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            self.store.flush()  # the decision goes away next: what it wrote must be on disk
        write_json_atomically(self._dir(operator) / STATE_FILE, {"last_published_batch": batch_id})
        decision.unlink(missing_ok=True)


def _create_exclusive(path: Path, table: pa.Table, after_offset: int) -> bool:
    """Write the decision unless it exists. True when this call wrote it."""
    schema = RELOCATION_SCHEMA.with_metadata({_AFTER_KEY: str(after_offset).encode()})

    def fill(temp: Path) -> None:
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table.replace_schema_metadata(schema.metadata))

    return write_atomically(path, fill, exclusive=True)


def _load_decision(path: Path) -> tuple[pa.Table, int]:
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    after = int((table.schema.metadata or {})[_AFTER_KEY])
    return table, after
