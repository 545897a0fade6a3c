"""The read path: ConsumeQueue units -> CommitLog bytes -> messages.

Shared by :class:`~store.message_store.MessageStore` (in-process, owns the directory) and
:class:`~store.read.store_reader.StoreReader` (read-only view used by Spark executors in ``path`` mode),
so both return identical results for the same offsets.

A replicated store bounds what it shows by its confirm offset (:mod:`store.write.visibility`):
``bound()`` returns it (None: no bound), and every answer here (max offsets, read windows,
offsets for timestamps) stops at the last unit whose record ends at or below it.

Two shapes of result:

* :meth:`QueueReader.get_messages` -> :class:`~store.types.GetResult` with one
  :class:`~store.types.MessageView` per message (convenient, Python objects).
* :meth:`QueueReader.read_batch` -> :class:`BatchReadResult` holding one ``pyarrow.RecordBatch``
  built without a Python object per message: the units are a NumPy view over the
  ConsumeQueue file, the records are decoded from one zero-copy slice per CommitLog file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from store.consumequeue.consume_queue import ConsumeQueue
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import UnknownQueue
from store.format.arrow_schema import EMPTY_MESSAGE_BATCH
from store.format.batch_decode import decode_records_to_arrow, decode_store_timestamps
from store.format.record_check import decode_record
from store.read.tag_filter import TagFilter, parse_tag_expression
from store.types import Boundary, GetResult, GetStatus, MessageView

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class CommitLogReadable(Protocol):
    """What the read path needs from a CommitLog (writer or read-only follower)."""

    @property
    def file_size_bytes(self) -> int: ...

    @property
    def min_offset(self) -> int: ...

    def view(self, offset: int, length: int) -> memoryview:
        """Zero-copy bytes ``[offset, offset+length)``; the range lies within one file."""
        ...


@dataclass(frozen=True, slots=True)
class BatchReadResult:
    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    batch: pa.RecordBatch

    @property
    def num_messages(self) -> int:
        return int(self.batch.num_rows)


@dataclass(frozen=True, slots=True)
class _Window:
    """Where a read starts and what it may return, after the RocketMQ status rules."""

    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int


class QueueReader:
    """Reads messages of any (topic, queue) from ConsumeQueues and a CommitLog."""

    def __init__(
        self,
        queues: ConsumeQueueStore,
        commitlog: CommitLogReadable,
        has_queue: Callable[[str, int], bool] | None = None,
        bound: Callable[[], int | None] | None = None,
    ) -> None:
        self._queues = queues
        self._commitlog = commitlog
        self._has_queue = has_queue
        self._bound = bound

    def visible_max(self, queue: ConsumeQueue) -> int:
        """``queue``'s max offset as readers see it (units of records ending at or below the
        bound)."""
        bound = self._bound() if self._bound is not None else None
        return queue.max_offset if bound is None else queue.max_offset_within(bound)

    # Offsets -------------------------------------------------------------------------------
    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get(topic, queue_id)
        return 0 if queue is None else int(queue.min_offset)

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get(topic, queue_id)
        return 0 if queue is None else self.visible_max(queue)

    def store_timestamps(self, commitlog_offsets: I64, sizes: I32) -> I64:
        """Store timestamps (ms) of the records at these CommitLog offsets."""
        out = np.empty(len(commitlog_offsets), dtype=np.int64)
        for rows, base, buf in self._slices(np.asarray(commitlog_offsets, dtype=np.int64), sizes):
            out[rows] = decode_store_timestamps(buf, commitlog_offsets[rows] - base)
        return out

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary) -> int:
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            self._check_queue(topic, queue_id)
            return 0
        found = queue.offset_for_timestamp(
            timestamp_ms, boundary, self.store_timestamps, self._commitlog.min_offset
        )
        visible = self.visible_max(queue)
        return min(found, visible) if boundary is Boundary.LOWER else min(found, visible - 1)

    # Reads -----------------------------------------------------------------------------------
    def get_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int, tag_expression: str | None = "*"
    ) -> GetResult:
        tag_filter = parse_tag_expression(tag_expression)
        window = self._window(topic, queue_id, offset)
        if window.status is not GetStatus.FOUND:
            return GetResult(window.status, window.next_offset, window.min_offset, window.max_offset)
        queue = self._queues.get(topic, queue_id)
        assert queue is not None
        units = queue.read_units(offset, min(max_messages, window.max_offset - offset))
        next_offset = offset + len(units)
        mask = tag_filter.code_mask(units["tags_code"].astype(np.int64))
        messages: list[MessageView] = []
        for unit in units[mask]:
            buf = self._commitlog.view(int(unit["offset"]), int(unit["size"]))
            view = decode_record(buf, 0)
            if tag_filter.matches(view.tags):
                messages.append(view)
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, next_offset, window.min_offset, window.max_offset, messages)

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        """Messages ``[offset, min(offset+max_messages, end_offset, max_offset))`` as Arrow."""
        tag_filter = parse_tag_expression(tag_expression)
        window = self._window(topic, queue_id, offset)
        if window.status is not GetStatus.FOUND:
            return BatchReadResult(
                window.status, window.next_offset, window.min_offset, window.max_offset, EMPTY_MESSAGE_BATCH
            )
        queue = self._queues.get(topic, queue_id)
        assert queue is not None
        limit = max_messages if end_offset is None else min(max_messages, end_offset - offset)
        limit = min(limit, window.max_offset - offset)
        if limit <= 0:
            return BatchReadResult(
                GetStatus.NO_MATCHED_MESSAGE,
                offset,
                window.min_offset,
                window.max_offset,
                EMPTY_MESSAGE_BATCH,
            )
        units = queue.read_units(offset, limit)
        next_offset = offset + len(units)
        batch = self._decode_units(units, tag_filter)
        status = GetStatus.FOUND if batch.num_rows else GetStatus.NO_MATCHED_MESSAGE
        return BatchReadResult(status, next_offset, window.min_offset, window.max_offset, batch)

    # Internals -------------------------------------------------------------------------------
    def _check_queue(self, topic: str, queue_id: int) -> None:
        if self._has_queue is not None and not self._has_queue(topic, queue_id):
            raise UnknownQueue(f"topic {topic!r} has no queue {queue_id}")

    def _window(self, topic: str, queue_id: int, offset: int) -> _Window:
        """RocketMQ ``getMessage`` status rules for a read starting at ``offset``."""
        queue = self._queues.get(topic, queue_id)
        if queue is None:
            if self._has_queue is not None and self._has_queue(topic, queue_id):
                status = GetStatus.NO_NEW_MESSAGE if offset == 0 else GetStatus.NO_MESSAGE_IN_QUEUE
                return _Window(status, 0, 0, 0)
            return _Window(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = queue.min_offset, self.visible_max(queue)
        if hi in (0, lo):
            if offset == hi:
                return _Window(GetStatus.NO_NEW_MESSAGE, offset, lo, hi)
            return _Window(
                GetStatus.NO_MESSAGE_IN_QUEUE if hi == 0 else GetStatus.OFFSET_TOO_SMALL, hi, lo, hi
            )
        if offset < lo:
            return _Window(GetStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return _Window(GetStatus.NO_NEW_MESSAGE, offset, lo, hi)
        if offset > hi:
            return _Window(GetStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        return _Window(GetStatus.FOUND, offset, lo, hi)

    def _slices(
        self, offsets: I64, sizes: npt.NDArray[np.integer]
    ) -> list[tuple[npt.NDArray[np.intp], int, npt.NDArray[np.uint8]]]:
        """Group records by CommitLog file: (row indexes, slice base offset, zero-copy bytes)."""
        if len(offsets) == 0:
            return []
        file_size = self._commitlog.file_size_bytes
        file_ids = offsets // file_size
        ends = offsets + np.asarray(sizes, dtype=np.int64)
        groups: list[tuple[npt.NDArray[np.intp], int, npt.NDArray[np.uint8]]] = []
        if file_ids[0] == file_ids[-1] and bool(np.all(file_ids == file_ids[0])):
            row_groups = [np.arange(len(offsets))]
        else:
            order = np.argsort(file_ids, kind="stable")
            bounds = np.flatnonzero(np.diff(file_ids[order])) + 1
            row_groups = np.split(order, bounds)
        for rows in row_groups:
            base = int(offsets[rows].min())
            end = int(ends[rows].max())
            buf = np.frombuffer(self._commitlog.view(base, end - base), dtype=np.uint8)
            groups.append((rows, base, buf))
        return groups

    def _decode_units(self, units: npt.NDArray[np.void], tag_filter: TagFilter) -> pa.RecordBatch:
        offsets = units["offset"].astype(np.int64)
        sizes = units["size"].astype(np.int64)
        if not tag_filter.matches_all:
            keep = tag_filter.code_mask(units["tags_code"].astype(np.int64))
            offsets, sizes = offsets[keep], sizes[keep]
        if len(offsets) == 0:
            return EMPTY_MESSAGE_BATCH
        batches = []
        for rows, base, buf in self._slices(offsets, sizes):
            batches.append(decode_records_to_arrow(buf, offsets[rows] - base))
        batch = batches[0] if len(batches) == 1 else pa.concat_batches(batches)
        if not tag_filter.matches_all and tag_filter.tags is not None:
            exact = pc.is_in(batch.column("tags"), value_set=pa.array(sorted(tag_filter.tags)))
            batch = batch.filter(pc.fill_null(exact, False))
        return batch
