"""``ConsumeQueueStore``: every ConsumeQueue of a store directory, and the dispatch that fills them.

Queues live in ``consumequeue/{topic}/{queueId}/`` and are created on first use. The CommitLog's
:class:`~store.commitlog.dispatch_batch.DispatchBatch` hand-offs are grouped per queue and
written with one vectorised ``put_units`` each; PREPARED and ROLLBACK transaction records
enter no queue (:func:`store.format.vocabulary.enter_consume_queue`).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np

from store.commitlog.dispatch_batch import DispatchBatch, queue_groups
from store.config import StoreConfig
from store.consumequeue.consume_queue import ConsumeQueue
from store.format.vocabulary import enter_consume_queue, enters_consume_queue
from store.io.fs import FileSystem

log = logging.getLogger(__name__)


class ConsumeQueueStore:
    """Every ConsumeQueue under ``consumequeue/``: lazily created, existing ones loaded at start."""

    def __init__(
        self, root: Path, units_per_file: int, *, read_only: bool = False, fs: FileSystem | None = None
    ) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self.read_only = read_only
        self._fs = fs
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._last_dispatched_ts = 0
        self._load()

    @staticmethod
    def from_config(
        config: StoreConfig, *, read_only: bool = False, fs: FileSystem | None = None
    ) -> ConsumeQueueStore:
        return ConsumeQueueStore(
            config.consume_queue_dir, config.consume_queue_units_per_file, read_only=read_only, fs=fs
        )

    def _load(self) -> None:
        """(Re)scan ``root`` for queue directories not yet known (copy-on-write of the dict)."""
        if not self.root.is_dir():
            return
        queues = dict(self._queues)
        for topic_dir in sorted(self.root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                key = (topic_dir.name, int(queue_dir.name)) if queue_dir.name.isdigit() else None
                if key is not None and key not in queues and queue_dir.is_dir():
                    queues[key] = ConsumeQueue(
                        queue_dir, self.units_per_file, read_only=self.read_only, fs=self._fs
                    )
        self._queues = queues

    def _queue(self, directory: Path) -> ConsumeQueue:
        return ConsumeQueue(directory, self.units_per_file, read_only=self.read_only, fs=self._fs)

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        if queue is not None:
            return queue
        with self._lock:
            queue = self._queues.get((topic, queue_id))
            if queue is None:
                directory = self.root / topic / str(queue_id)
                queue = self._queue(directory)
                self._queues = {**self._queues, (topic, queue_id): queue}
            return queue

    def queues(self, topic: str | None = None) -> dict[tuple[str, int], ConsumeQueue]:
        return {key: q for key, q in self._queues.items() if topic is None or key[0] == topic}

    def dispatch(self, batch: DispatchBatch) -> int:
        """Append the batch's units to their queues; returns the number of units written.

        PREPARED and ROLLBACK transaction messages are skipped (RocketMQ
        ``CommitLogDispatcherBuildConsumeQueue``). Rows are grouped per (topic, queue)
        (:func:`~store.commitlog.dispatch_batch.queue_groups`), so each queue gets one
        vectorised ``put_units``.
        """
        if len(batch) == 1:
            return self._dispatch_one(batch)
        rows = np.flatnonzero(enter_consume_queue(batch.sys_flags))
        if len(rows) == 0:
            return 0
        order, starts = queue_groups(batch.topic_codes[rows], batch.queue_ids[rows])
        written = 0
        for group in np.split(rows[order], starts[1:]):
            head = int(group[0])
            topic = batch.topics[int(batch.topic_codes[head])]
            queue = self.get_or_create(topic, int(batch.queue_ids[head]))
            written += queue.put_units(
                batch.queue_offsets[group],
                batch.commitlog_offsets[group],
                batch.sizes[group],
                batch.tags_codes[group],
            )
        self._last_dispatched_ts = max(self._last_dispatched_ts, int(batch.store_timestamps_ms[rows].max()))
        return written

    def _dispatch_one(self, batch: DispatchBatch) -> int:
        if not enters_consume_queue(int(batch.sys_flags[0])):
            return 0
        queue = self.get_or_create(batch.topics[int(batch.topic_codes[0])], int(batch.queue_ids[0]))
        written = queue.put_unit(
            int(batch.queue_offsets[0]),
            int(batch.commitlog_offsets[0]),
            int(batch.sizes[0]),
            int(batch.tags_codes[0]),
        )
        self._last_dispatched_ts = max(self._last_dispatched_ts, int(batch.store_timestamps_ms[0]))
        return int(written)

    def max_commitlog_end(self) -> int:
        """Largest ``offset + size`` over all queues (0 when empty): where CQ dispatch reached."""
        return max((q.last_commitlog_end() for q in self._queues.values()), default=0)

    def delete_topic(self, topic: str) -> int:
        """Destroy every queue of ``topic`` and its directory; returns how many were removed."""
        with self._lock:
            doomed = [q for key, q in self._queues.items() if key[0] == topic]
            self._queues = {k: q for k, q in self._queues.items() if k[0] != topic}
        for queue in doomed:
            queue.destroy()
        topic_dir = self.root / topic
        if topic_dir.is_dir() and not any(topic_dir.iterdir()):
            topic_dir.rmdir()
        return len(doomed)

    def truncate_dirty(self, max_commitlog_offset: int, *, durable: bool = False) -> None:
        """Drop units of records ending beyond the offset, in every queue (``durable``: synced
        before returning, see :meth:`ConsumeQueue.truncate_dirty`)."""
        for queue in self._queues.values():
            if durable and queue.last_commitlog_end() <= max_commitlog_offset:
                continue  # nothing to cut: no need to sync it
            queue.truncate_dirty(max_commitlog_offset, durable=durable)

    def recover(self) -> None:
        for queue in self._queues.values():
            queue.recover()

    def delete_files_below(self, min_commitlog_offset: int) -> int:
        """Retention over all queues; returns the number of files deleted."""
        return sum(q.delete_files_below(min_commitlog_offset) for q in self._queues.values())

    def correct_min_offsets(self, min_commitlog_offset: int) -> None:
        for queue in self._queues.values():
            queue.correct_min_offset(min_commitlog_offset)

    def refresh(self) -> None:
        """Read-only mode: discover new queues and re-scan known ones."""
        if not self.read_only:
            return
        with self._lock:
            known = self._queues
            self._load()
        for queue in known.values():
            queue.refresh()

    def flush(self) -> int:
        """Flush every queue; returns the store timestamp (ms) of the last unit dispatched
        before the flush started (0 when nothing was ever dispatched) for the checkpoint."""
        last_ts = self._last_dispatched_ts
        for queue in list(self._queues.values()):
            queue.flush()
        return last_ts

    def release_pages(self) -> None:
        """Read-only followers: drop the pages the reads mapped (the page cache keeps them)."""
        for queue in self._queues.values():
            queue.release_pages()

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()

    def destroy(self) -> None:
        """Delete every queue (rebuild from the CommitLog)."""
        for topic in {key[0] for key in self._queues}:
            self.delete_topic(topic)
