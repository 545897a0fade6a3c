"""``StoreReader``: a read-only view of a store directory, without the lock.

Spark executors in ``path`` mode are separate processes; they read ConsumeQueue and CommitLog
files directly while a broker (or nobody) writes them. Files are mapped read-only, nothing is
recovered or written, and the writer's publication order (CommitLog bytes first, then the
ConsumeQueue unit with its size written last) guarantees a reader never sees a unit whose
record is incomplete. File sizes are taken from the files themselves.

Results are identical to :class:`~store.message_store.MessageStore`'s for the same offsets:
both use :class:`~store.queue_reader.QueueReader`.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Self

from store.commitlog import CommitLog
from store.config import GIB
from store.consume_queue import CQ_UNIT_SIZE, ConsumeQueueStore
from store.errors import CorruptStore, UnknownTopic
from store.queue_reader import BatchReadResult, QueueReader
from store.topic_config import TopicConfigTable
from store.types import Boundary

DEFAULT_CQ_UNITS_PER_FILE = 300_000


class StoreReader:
    """Read-only access to the messages of a store directory (thread-safe for reads)."""

    def __init__(self, store_dir: Path | str) -> None:
        self.store_dir = Path(store_dir)
        if not (self.store_dir / "commitlog").is_dir():
            raise CorruptStore(f"{self.store_dir} is not a sparkmq store (no commitlog/ directory)")
        self._commitlog = CommitLog(self.store_dir / "commitlog", _commitlog_file_size(self.store_dir))
        self._commitlog.load(read_only=True)
        self._queues = ConsumeQueueStore(
            self.store_dir / "consumequeue", _cq_units_per_file(self.store_dir), read_only=True
        )
        self._topics_path = self.store_dir / "config" / "topics.json"
        self._reader = QueueReader(self._queues, self._commitlog)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self.close()

    def close(self) -> None:
        self._queues.close()
        self._commitlog.close()

    def refresh(self) -> None:
        """Pick up files, queues and units written since the last look."""
        self._commitlog.refresh()
        self._queues.refresh()
        self._queues.correct_min_offsets(self._commitlog.min_offset)

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
            result[queue_id] = (0, 0) if cq is None else (cq.min_offset, cq.max_offset)
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


def _commitlog_file_size(store_dir: Path) -> int:
    files = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
    return files[0].stat().st_size if files else GIB


def _cq_units_per_file(store_dir: Path) -> int:
    root = store_dir / "consumequeue"
    for first in root.glob("*/*/" + "[0-9]" * 20):
        size = first.stat().st_size
        if size and size % CQ_UNIT_SIZE == 0:
            return size // CQ_UNIT_SIZE
    return DEFAULT_CQ_UNITS_PER_FILE
