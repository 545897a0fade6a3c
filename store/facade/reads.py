"""The facade's read role: queue reads (pull, batches, offsets by time), lookups (by
CommitLog offset, offsetMsgId, key), raw record reads, and waiting for arrivals.

Queue reads go through :class:`~store.read.queue_reader.QueueReader` (bounded by the
confirm offset on a replica); raw reads go to the CommitLog.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from store.commitlog.gather import GatheredRecords, gather_records
from store.errors import IndexBehind, InvalidArgument
from store.facade.base import FacadeState
from store.format.ids import decode_msg_id
from store.format.record import PREPARED_TX_OFFSET_POS
from store.format.vocabulary import SYSFLAG_TX_COMMIT, SYSFLAG_TX_MASK
from store.read.queue_reader import BatchReadResult
from store.types import Boundary, GetResult, MessageView
from store.write.arrivals import ArrivalListener


class Reads(FacadeState):
    """Reads and lookups (a role of :class:`~store.message_store.MessageStore`)."""

    def queue_units(
        self, topic: str, queue_id: int, offset: int, count: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(CommitLog offsets, sizes)`` of queue offsets ``[offset, offset + count)`` of a queue,
        those still stored (units below the queue's min offset are gone: skipped)."""
        self._ensure_open()
        queue = self._reader.queue(topic, queue_id)
        if queue is None or count <= 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty
        start = max(offset, queue.min_offset)
        units = queue.read_units(start, offset + count - start)
        return units["offset"].astype(np.int64), units["size"].astype(np.int64)

    def read_bytes(self, offset: int, size: int) -> bytes | None:
        """``size`` stored bytes from CommitLog ``offset`` (None unless all within one file)."""
        self._ensure_open()
        return self._commitlog.read(offset, size)

    def read_records(self, offsets: npt.ArrayLike) -> GatheredRecords:
        """The stored bytes of the records at CommitLog ``offsets``, back to back in one buffer
        (one pass, no Python object per record); absent ones are skipped (``rows`` says which
        offset each record is)."""
        self._ensure_open()
        return gather_records(self._commitlog, offsets)

    def committed_half_offsets(self, from_offset: int) -> Iterator[tuple[int, int]]:
        """``(CommitLog offset, preparedTransactionOffset)`` of every COMMIT-type record from
        ``from_offset`` to the end of the CommitLog, in log order."""
        self._ensure_open()
        for batch in self._commitlog.scan(max(from_offset, self._commitlog.min_offset)):
            commits = (batch.sys_flags & SYSFLAG_TX_MASK) == SYSFLAG_TX_COMMIT
            for offset in batch.commitlog_offsets[commits].tolist():
                raw = self._commitlog.read_record(offset)
                if raw is not None:
                    yield (
                        offset,
                        int.from_bytes(raw[PREPARED_TX_OFFSET_POS : PREPARED_TX_OFFSET_POS + 8], "big"),
                    )

    def read_record(self, offset: int) -> bytes | None:
        """The stored bytes of the record at CommitLog ``offset`` (None when absent)."""
        self._ensure_open()
        return self._commitlog.read_record(offset)

    @property
    def commitlog_max_offset(self) -> int:
        """Where the next record will be appended."""
        return self._commitlog.max_offset

    def stored_identities(self, from_offset: int) -> Iterator[tuple[str, str | None]]:
        """(topic, UNIQ_KEY) of every record from CommitLog offset ``from_offset`` to the end,
        in log order (how a resumed relocation finds what it already wrote)."""
        self._ensure_open()
        for batch in self._commitlog.scan(max(from_offset, self._commitlog.min_offset)):
            for code, uniq in zip(batch.topic_codes.tolist(), batch.uniq_keys, strict=True):
                yield batch.topics[code], uniq

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` after every put (keep it cheap)."""
        self._arrivals.add_listener(listener)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        self._arrivals.remove_listener(listener)

    def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Block until the queue's max offset passes ``offset`` (True) or the timeout (False)."""
        return self._arrivals.wait_for(topic, queue_id, offset, timeout_s)

    def wait_indexed(self, timeout_s: float = 10.0) -> bool:
        """Block until every message acknowledged so far is in the key index."""
        if self._index_dispatcher is None:
            return True
        return self._index_dispatcher.wait_indexed(self._commitlog.max_offset, timeout_s)

    # ------------------------------------------------------------------ consume
    def get_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int = 32, tag_expression: str | None = "*"
    ) -> GetResult:
        self._ensure_open()
        _check_read_args(offset, max_messages)
        return self._reader.get_messages(topic, queue_id, offset, max_messages, tag_expression)

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        self._ensure_open()
        _check_read_args(offset, max_messages)
        return self._reader.read_batch(topic, queue_id, offset, max_messages, tag_expression, end_offset)

    def min_offset(self, topic: str, queue_id: int) -> int:
        self._require_queue(topic, queue_id)
        cq = self._queues.get(topic, queue_id)
        return 0 if cq is None else cq.min_offset

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's max offset as readers see it (a replica: bounded by the confirm offset)."""
        cq = self._queues.get(topic, queue_id)
        if cq is None:
            self._require_queue(topic, queue_id)
            return 0
        return self._reader.visible_max(cq)

    def queue_offsets(self, topic: str) -> dict[int, tuple[int, int]]:
        """queue id -> (min offset, max offset) for every queue of ``topic``."""
        count = self.queue_count(topic)
        return {q: (self.min_offset(topic, q), self.max_offset(topic, q)) for q in range(count)}

    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        """LOWER: leftmost offset stored at or after T (max offset when T is after the last
        message). UPPER: last offset stored at or before T (min offset - 1 when T precedes
        every message)."""
        self._ensure_open()
        self._require_queue(topic, queue_id)
        return self._reader.offset_for_timestamp(topic, queue_id, timestamp_ms, boundary)

    # ------------------------------------------------------------------ query
    def get_by_commitlog_offset(self, offset: int) -> MessageView | None:
        self._ensure_open()
        return self._commitlog.get_message(offset)

    def get_by_msg_id(self, msg_id: str) -> MessageView | None:
        """Look up an offsetMsgId (32 hex chars); None when absent (or another broker's)."""
        self._ensure_open()
        _, offset = decode_msg_id(msg_id)
        if offset < self._commitlog.min_offset:
            return None
        return self._commitlog.get_message(offset)

    def query_by_key(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_results: int = 64
    ) -> list[MessageView]:
        """Messages of ``topic`` with ``key`` among their KEYS (or as UNIQ_KEY), newest first."""
        self._ensure_open()
        if self._index is None:
            raise InvalidArgument("the key index is disabled (index_enabled=False)")
        wait_ms = self.config.index_lookup_wait_ms
        if not self.wait_indexed(wait_ms / 1000):
            behind = self.stats().index_dispatch_lag_bytes
            raise IndexBehind(
                f"the key index is {behind} bytes behind the CommitLog and did not catch up in "
                f"{wait_ms} ms; a lookup now could miss stored messages"
            )
        found: list[MessageView] = []
        seen: set[int] = set()
        for offset in self._index.query(topic, key, begin_ms, end_ms, max_results):
            if offset in seen or offset < self._commitlog.min_offset:
                continue
            seen.add(offset)
            view = self._commitlog.get_message(offset)
            if view is None or view.topic != topic:
                continue
            matches = key in view.keys or view.uniq_key == key
            if matches and begin_ms <= view.store_timestamp_ms <= end_ms:
                found.append(view)
        return found[:max_results]

    def get_by_uniq_key(self, topic: str, uniq_key: str) -> MessageView | None:
        hits = [m for m in self.query_by_key(topic, uniq_key) if m.uniq_key == uniq_key]
        return hits[0] if hits else None


def _check_read_args(offset: int, max_messages: int) -> None:
    if offset < 0:
        raise InvalidArgument(f"offset must be >= 0, got {offset}")
    if max_messages < 1:
        raise InvalidArgument(f"max_messages must be >= 1, got {max_messages}")
