"""Relocating many parked records in one atomic append: read, rebuild, append.

:class:`Relocator` is what ``MessageStore.relocate_pointers`` runs: the parked records are read
by CommitLog offset in one pass (:func:`store.commitlog.gather.gather_records`), rebuilt as the
records RocketMQ delivers (:func:`store.write.relocate_batch.relocated_records`: byte edits, no
decode/encode per record) and appended in one call under the put lock. A parked record that is
gone (retention deleted its file) is logged and skipped, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from store.commitlog.commitlog import CommitLog
from store.commitlog.gather import gather_records
from store.write.appender import Appender
from store.write.relocate_batch import ParkedRecords, RelocatedRecords, relocated_records
from store.write.results import BatchPutResult

log = logging.getLogger("sparkmq.store")

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RelocationPointers:
    """Relocation requests as columns, in delivery order: parked record ``commitlog_offsets[i]``
    (``sizes[i]`` bytes when known, else 0) relocated as ``kinds[i]``
    (:class:`~store.write.relocate.RelocationKind`) with ``enqueue_ms[i]`` / ``dequeue_ms[i]``."""

    commitlog_offsets: I64
    kinds: npt.NDArray[np.int8]
    enqueue_ms: I64
    dequeue_ms: I64
    sizes: I64

    def __len__(self) -> int:
        return len(self.commitlog_offsets)

    def take(self, rows: npt.NDArray[np.integer]) -> RelocationPointers:
        """The requests at ``rows``, in that order."""
        return RelocationPointers(
            self.commitlog_offsets[rows],
            self.kinds[rows],
            self.enqueue_ms[rows],
            self.dequeue_ms[rows],
            self.sizes[rows],
        )

    def rows(self, lo: int, hi: int) -> RelocationPointers:
        return RelocationPointers(
            self.commitlog_offsets[lo:hi],
            self.kinds[lo:hi],
            self.enqueue_ms[lo:hi],
            self.dequeue_ms[lo:hi],
            self.sizes[lo:hi],
        )

    @staticmethod
    def of(
        offsets: Sequence[int] | I64,
        kinds: Sequence[int] | npt.NDArray[np.integer],
        enqueue_ms: Sequence[int] | I64,
        dequeue_ms: Sequence[int] | I64,
        sizes: Sequence[int] | I64 | None = None,
    ) -> RelocationPointers:
        n = len(offsets)
        return RelocationPointers(
            np.asarray(offsets, dtype=np.int64),
            np.asarray(kinds, dtype=np.int8),
            np.asarray(enqueue_ms, dtype=np.int64),
            np.asarray(dequeue_ms, dtype=np.int64),
            np.zeros(n, dtype=np.int64) if sizes is None else np.asarray(sizes, dtype=np.int64),
        )


class RelocateOutcome(NamedTuple):
    """What one relocation call appended: record ``j`` of ``result`` relocates request
    ``rows[j]`` and was due at ``due_ms[j]`` (0 for a roll or a send-back)."""

    requested: int
    rows: I64
    due_ms: I64
    result: BatchPutResult | None
    #: Each appended record's topic.
    topics: tuple[str, ...] = ()

    @property
    def appended(self) -> int:
        return len(self.rows)


class Relocator:
    def __init__(
        self,
        commitlog: CommitLog,
        appender: Appender,
        level_delays_ms: Sequence[int],
        timer_precision_ms: int,
    ) -> None:
        self._commitlog = commitlog
        self._appender = appender
        self._level_delays_ms = tuple(level_delays_ms)
        self._timer_precision_ms = timer_precision_ms

    def build(self, pointers: RelocationPointers) -> RelocatedRecords:
        """The records relocating ``pointers`` would append (rows index ``pointers``)."""
        sizes = pointers.sizes if bool((pointers.sizes > 0).all()) else None
        found = gather_records(self._commitlog, pointers.commitlog_offsets, sizes)
        if found.present < len(pointers):
            missing = np.setdiff1d(np.arange(len(pointers)), found.rows)
            log.error(
                "relocation: no record at CommitLog offset(s) %s (retention?): skipped",
                pointers.commitlog_offsets[missing[:10]].tolist(),
            )
        rows = found.rows
        built = relocated_records(
            ParkedRecords(
                found.buffer,
                found.starts,
                found.sizes,
                pointers.commitlog_offsets[rows],
                pointers.kinds[rows],
                pointers.enqueue_ms[rows],
                pointers.dequeue_ms[rows],
            ),
            level_delays_ms=self._level_delays_ms,
            timer_precision_ms=self._timer_precision_ms,
        )
        return RelocatedRecords(built.records, rows[built.rows], built.due_ms)

    def relocate(self, pointers: RelocationPointers) -> RelocateOutcome:
        """Build and append in one atomic append (nothing is written when a request is refused)."""
        built = self.build(pointers)
        if len(built.rows) == 0:
            return RelocateOutcome(len(pointers), built.rows, built.due_ms, None)
        result = self._appender.put_encoded(built.records)
        return RelocateOutcome(len(pointers), built.rows, built.due_ms, result, built.records.topics)
