"""Decisions a window ahead: "due at T" records in the CommitLog, relocated at T exactly once.

The store half of the broker's delay wheel (``broker/wheel.py``); the records are declared in
:mod:`store.publish.due_records`. With the wheel, a relocation batch of the delay resolver
(:mod:`store.publish.relocations`) holds requests due *later* (the resolver decides a window
ahead): their ``dequeue_ms`` is their due time, after the moment of the decision.

1. **Split** (:func:`split_ahead`): a decided batch's DELIVER requests whose ``dequeue_ms`` is
   after the decision's time go to the wheel, grouped by that time (one :class:`Decision` per
   due time, cut at :data:`MAX_REQUESTS_PER_RECORD`); the rest are published at once, as before.
   The split is a function of the decision file only, so a resumed batch splits the same.
2. **Write** (:meth:`WheelLog.write`): the batch's decisions are appended to
   :data:`WHEEL_TOPIC` queue 0 in **one atomic append**, UNIQ_KEY
   ``wheel:<operator>:<batch>:<part>``. A resumed batch first looks for part 0's key among the
   records written after the batch's decision point: all or none are there.
3. **Publish at T** (:meth:`WheelLog.publish`): the requests are expanded (ranges through the
   ConsumeQueue) and relocated in order, in atomic chunks, like a batch. A decision recovered
   after a crash or a failover is checked record by record first
   (:func:`~store.publish.relocation_checks.not_relocated_before`): a parked record found in
   its target topic (same UNIQ_KEY, stored after it) is skipped. So a decision is relocated once
   across a ``kill -9`` before, during or after its publish.
4. **Progress** (:meth:`WheelLog.mark`): a record of queue 1 says which decisions are published
   (a watermark and the published offsets above it); the newest one is read at recovery, and
   everything of queue 0 from its watermark not marked is outstanding (:meth:`WheelLog.load`).
   A progress record lost in a crash costs one resume check, never a second relocation.

Failure modes: store errors (``StoreError``) propagate; the wheel retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from store.format.record import RecordFields
from store.message_store import MessageStore
from store.publish.due_records import (
    DECISION_QUEUE,
    MAX_REQUESTS_PER_RECORD,
    PROGRESS_QUEUE,
    REQUEST_DTYPE,
    WHEEL_TOPIC,
    Decision,
    DueRecordError,
    Progress,
    decision_uniq_key,
    decode_decision,
    decode_progress,
    encode_decision,
    encode_progress,
)
from store.publish.relocation_checks import not_relocated_before
from store.publish.relocation_requests import DECISION_SCHEMA, expand_requests
from store.types import GetStatus
from store.write.relocate import RelocationKind
from store.write.relocator import RelocationPointers

log = logging.getLogger("sparkmq.operators")

#: How many decision records :meth:`WheelLog.load` reads per queue read.
_LOAD_PAGE = 256


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A decision record as stored: its queue offset (queue 0) and CommitLog offset."""

    queue_offset: int
    commitlog_offset: int
    decision: Decision
    #: Recovered from the log (not handed over by the call that wrote it): publish with resume.
    recovered: bool


def split_ahead(table: pa.Table, decided_ms: int | None) -> tuple[pa.Table, list[tuple[int, pa.Table]]]:
    """``(published at once, [(due ms, requests), ...])`` of a decision table
    (``DECISION_SCHEMA``): DELIVER requests with ``dequeue_ms > decided_ms`` wait for the wheel,
    grouped by ``dequeue_ms`` ascending, each group in decision order. ``decided_ms`` None (a
    decision of an earlier version): everything at once."""
    if decided_ms is None or table.num_rows == 0:
        return table, []
    kinds = table.column("kind").to_numpy()
    dequeue = table.column("dequeue_ms").to_numpy()
    ahead = (kinds == RelocationKind.DELIVER) & (dequeue > decided_ms)
    if not bool(ahead.any()):
        return table, []
    now_rows = np.flatnonzero(~ahead)
    groups = []
    for due in np.unique(dequeue[ahead]).tolist():
        groups.append((int(due), table.take(np.flatnonzero(ahead & (dequeue == due)))))
    return table.take(now_rows), groups


def decisions_of(operator: str, batch_id: int, groups: list[tuple[int, pa.Table]]) -> list[Decision]:
    """The records of a batch's wheel groups (parts numbered in order)."""
    out: list[Decision] = []
    for due, table in groups:
        requests = np.empty(table.num_rows, dtype=REQUEST_DTYPE)
        for name in REQUEST_DTYPE.names or ():
            requests[name] = table.column(name).to_numpy()
        for lo in range(0, len(requests), MAX_REQUESTS_PER_RECORD):
            part = requests[lo : lo + MAX_REQUESTS_PER_RECORD]
            out.append(Decision(operator, batch_id, len(out), due, part))
    return out


def decision_table(decision: Decision) -> pa.Table:
    """The requests of a decision as a ``DECISION_SCHEMA`` table."""
    columns = {name: np.asarray(decision.requests[name]).astype(field.type.to_pandas_dtype())
               for name, field in zip(DECISION_SCHEMA.names, DECISION_SCHEMA, strict=True)}  # fmt: skip
    return pa.table(columns, schema=DECISION_SCHEMA)


class WheelLog:
    """The wheel's records in one store (see the module docstring). Thread-safe as the store is."""

    def __init__(self, store: MessageStore, chunk_rows: int) -> None:
        self.store = store
        self.chunk_rows = chunk_rows
        #: After a failover: where this master's leadership began (see ``RelocationLog``).
        self.inherited_before: Callable[[], int | None] = lambda: None
        #: The lock an operator's relocation batches are published under
        #: (``RelocationLog.exclusive``), taken around a checked publish (see :meth:`publish`).
        self.exclusive: Callable[[str], AbstractContextManager[object]] = lambda operator: nullcontext()

    def write(self, decisions: list[Decision], after: int, *, resume: bool) -> list[Scheduled]:
        """Append ``decisions`` (one batch's) atomically unless a resumed batch finds them
        written after CommitLog offset ``after``; the records this call wrote (none if found)."""
        if not decisions:
            return []
        first = decisions[0]
        if resume and (WHEEL_TOPIC, decision_uniq_key(first.operator, first.batch_id, 0)) in set(
            self.store.stored_identities(after)
        ):
            return []
        host = (self.store.config.store_host, self.store.config.store_port)
        now = self.store.now_ms()
        records = [
            RecordFields(
                topic=WHEEL_TOPIC,
                body=encode_decision(d),
                queue_id=DECISION_QUEUE,
                properties={"UNIQ_KEY": decision_uniq_key(d.operator, d.batch_id, d.part)},
                born_timestamp_ms=now,
                born_host=host,
                store_host=host,
            )
            for d in decisions
        ]
        results = self.store.append_records(records)
        return [
            Scheduled(r.queue_offset, r.commitlog_offset, d, recovered=False)
            for r, d in zip(results, decisions, strict=True)
        ]

    def publish(self, item: Scheduled) -> tuple[int, npt.NDArray[np.int64]]:
        """Relocate the decision's requests not yet relocated; ``(appended, due ms of each)``.

        A recovered decision (or, after a failover, a record parked before this master's
        leadership) is checked record by record: one found relocated in its target topic after
        it is skipped, whoever wrote it (this broker before a crash, an earlier master, a
        decision of the same message by the new master's resolver). The check and the append
        after it hold :attr:`exclusive`: a batch of the new master's resolver that relocates the
        same record at once (its decision came after T) checks under the same lock, so the two
        never both find it not relocated."""
        pointers = expand_requests(self.store, decision_table(item.decision))
        bound = (2**63 - 1) if item.recovered else self.inherited_before()
        if not bound:
            return relocate_from(self.store, pointers, 0, self.chunk_rows)
        with self.exclusive(item.decision.operator):
            pointers, skipped = not_relocated_before(self.store, pointers, bound, self.chunk_rows)
            if skipped:
                log.info("wheel: %d request(s) of decision %d already relocated", skipped, item.queue_offset)
            return relocate_from(self.store, pointers, 0, self.chunk_rows)

    def mark(self, progress: Progress) -> None:
        """Append the wheel's progress (the newest one counts)."""
        host = (self.store.config.store_host, self.store.config.store_port)
        self.store.append_records(
            [
                RecordFields(
                    topic=WHEEL_TOPIC,
                    body=encode_progress(progress),
                    queue_id=PROGRESS_QUEUE,
                    born_timestamp_ms=self.store.now_ms(),
                    born_host=host,
                    store_host=host,
                )
            ]
        )

    def _bounds(self, queue_id: int) -> tuple[int, int]:
        """``(min, max)`` queue offsets of a wheel queue; ``(0, 0)`` before its first record."""
        got = self.store.get_messages(WHEEL_TOPIC, queue_id, 0, 1)
        if got.status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
            return 0, 0
        return got.min_offset, got.max_offset

    def progress(self) -> Progress:
        """The newest progress record (watermark 0 when there is none)."""
        first, end = self._bounds(PROGRESS_QUEUE)
        if end <= first:
            return Progress(0)
        got = self.store.get_messages(WHEEL_TOPIC, PROGRESS_QUEUE, end - 1, 1)
        if not got.messages:
            return Progress(0)
        return decode_progress(got.messages[0].body)

    def load(self) -> tuple[Progress, list[Scheduled]]:
        """The progress and every decision not published, in queue order."""
        progress = self.progress()
        first, end = self._bounds(DECISION_QUEUE)
        offset = max(progress.watermark, first)
        out: list[Scheduled] = []
        while offset < end:
            got = self.store.get_messages(WHEEL_TOPIC, DECISION_QUEUE, offset, _LOAD_PAGE)
            if not got.messages:
                break
            for view in got.messages:
                if progress.published(view.queue_offset):
                    continue
                try:
                    decision = decode_decision(view.body)
                except DueRecordError as exc:
                    log.error("wheel: decision at queue offset %d unreadable: %s", view.queue_offset, exc)
                    continue
                out.append(Scheduled(view.queue_offset, view.commitlog_offset, decision, recovered=True))
            offset = got.next_offset
        return progress, out


def relocate_from(
    store: MessageStore, pointers: RelocationPointers, start: int, chunk_rows: int
) -> tuple[int, npt.NDArray[np.int64]]:
    """Relocate ``pointers[start:]`` in atomic chunks; ``(appended, due ms of each appended)``."""
    appended, due = 0, []
    for lo in range(start, len(pointers), chunk_rows):
        outcome = store.relocate_pointers(pointers.rows(lo, lo + chunk_rows))
        appended += outcome.appended
        due.append(outcome.due_ms)
    return appended, np.concatenate(due) if due else np.zeros(0, dtype=np.int64)
