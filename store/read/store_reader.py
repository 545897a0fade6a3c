"""``StoreReader``: a read-only view of a store directory, without the lock.

Spark executors in ``path`` mode are separate processes; they read ConsumeQueue and CommitLog
files directly while a broker (or nobody) writes them. Files are mapped read-only, nothing is
recovered or written, and the writer's publication order (CommitLog bytes first, then the
ConsumeQueue unit with its size written last) guarantees a reader never sees a unit whose
record is incomplete. File sizes come from the directory's recorded layout
(:mod:`store.metadata.file_sizes`). ``config`` is what a :class:`MessageStore` needs to open the directory
as its owner.

Results are identical to :class:`~store.message_store.MessageStore`'s for the same offsets:
both use :class:`~store.read.queue_reader.QueueReader`. A replicated store (its owner says so in
``config/store.json``) is read up to its confirm offset, which the owner writes in place into the
checkpoint every time it moves (:mod:`store.write.visibility`), so a Spark executor sees what the
broker's own readers see.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from store.commitlog.commitlog import CommitLog
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import CorruptStore, UnknownTopic
from store.io.fs import FileHandle, OsFileSystem
from store.metadata.checkpoint import CHECKPOINT_PAGE_SIZE, CONFIRM_OFFSET_POS, LONG_FIELD
from store.metadata.file_sizes import existing_config, read_replicated
from store.metadata.topic_config import TopicConfigTable
from store.read.queue_reader import BatchReadResult, QueueReader
from store.types import Boundary


class StoreReader:
    """Read-only access to the messages of a store directory (thread-safe for reads)."""

    def __init__(self, store_dir: Path | str) -> None:
        self.store_dir = Path(store_dir)
        if not (self.store_dir / "commitlog").is_dir():
            raise CorruptStore(f"{self.store_dir} is not a sparkmq store (no commitlog/ directory)")
        self.config = existing_config(self.store_dir)
        self._commitlog = CommitLog(self.config.commitlog_dir, self.config.commitlog_file_size_bytes)
        self._commitlog.load(read_only=True)
        self._queues = ConsumeQueueStore.from_config(self.config, read_only=True)
        self._topics_path = self.store_dir / "config" / "topics.json"
        self._checkpoint: FileHandle | None = None
        self._open_checkpoint()
        self._reader = QueueReader(self._queues, self._commitlog, bound=self.confirm_offset)

    def _open_checkpoint(self) -> None:
        """Map the checkpoint when the store is replicated."""
        path = self.config.checkpoint_path
        if self._checkpoint is not None or not read_replicated(self.store_dir) or not path.exists():
            return
        if path.stat().st_size >= CHECKPOINT_PAGE_SIZE:
            self._checkpoint = OsFileSystem().open(path, read_only=True)

    def confirm_offset(self) -> int | None:
        """The owner's confirm offset (None: not a replicated store, no bound)."""
        handle = self._checkpoint
        if handle is None:
            return None
        (offset,) = LONG_FIELD.unpack(handle.read(CONFIRM_OFFSET_POS, LONG_FIELD.size))
        return int(offset)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def close(self) -> None:
        self._queues.close()
        self._commitlog.close()
        if self._checkpoint is not None:
            self._checkpoint.close()

    def release_pages(self) -> None:
        """Unmap the pages of the store's files the reads so far mapped. They count in this
        process's RSS until then (a Spark worker that read a million records held 150 MB of
        CommitLog pages across batches); the page cache keeps them, so the next read of the same
        bytes costs a minor fault, not a disk read. Safe while results of earlier reads are in
        use: the mappings stay, only their page table entries go."""
        self._commitlog.release_pages()
        self._queues.release_pages()

    def refresh(self) -> None:
        """Pick up files, queues and units written since the last look."""
        self._commitlog.refresh()
        self._queues.refresh()
        self._queues.correct_min_offsets(self._commitlog.min_offset)
        self._open_checkpoint()

    def topics(self) -> dict[str, int]:
        """User topics -> queue count, from ``config/topics.json`` as last persisted."""
        if not self._topics_path.exists():
            return {}
        return TopicConfigTable(self._topics_path).topics()

    def queue_count(self, topic: str) -> int:
        topics = self.topics()
        if topic in topics:
            return topics[topic]
        self._queues.refresh()
        queue_ids = [q for (t, q) in self._queues.queues(topic)]
        if not queue_ids:
            raise UnknownTopic(f"unknown topic {topic!r} in {self.store_dir}")
        return 1 + max(queue_ids)

    def queue_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset), freshly scanned."""
        count = self.queue_count(topic)
        self.refresh()
        result = {}
        for queue_id in range(count):
            cq = self._queues.get(topic, queue_id)
            result[queue_id] = (0, 0) if cq is None else (cq.min_offset, self._reader.visible_max(cq))
        return result

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        """Same contract as :meth:`MessageStore.read_batch` (refreshes when asked past the
        last known unit)."""
        cq = self._queues.get(topic, queue_id)
        wanted = offset + max_messages if end_offset is None else min(end_offset, offset + max_messages)
        if cq is None or cq.max_offset < wanted:
            self.refresh()
        return self._reader.read_batch(topic, queue_id, offset, max_messages, tag_expression, end_offset)

    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        self.refresh()
        return self._reader.offset_for_timestamp(topic, queue_id, timestamp_ms, boundary)
