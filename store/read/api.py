"""``QueueReadApi``: the read signature every reader of a store offers, written once.

:class:`~store.message_store.MessageStore` (the owner), :class:`~store.read.store_reader.StoreReader`
(a lock-free follower in another process, e.g. a Spark executor in ``path`` mode) and the
:class:`~store.read.queue_reader.QueueReader` they share all read a ConsumeQueue this way, and
so does the Kafka gateway's store port. Code that only reads takes a ``QueueReadApi``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from store.read.queue_reader import BatchReadResult
from store.types import Boundary


@runtime_checkable
class QueueReadApi(Protocol):
    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        """Units ``[offset, min(end_offset, offset + max_messages))`` of one queue, filtered by
        ``tag_expression`` (RocketMQ ``a || b``; ``*`` or None for all), decoded into one
        ``pyarrow.RecordBatch`` (``MESSAGE_SCHEMA``). ``status`` says why nothing came back
        (no new message, offset too small or past the end); ``next_offset`` is where to go on."""
        ...

    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        """LOWER: the leftmost offset stored at or after ``timestamp_ms`` (the max offset when
        it is after the last message). UPPER: the last offset stored at or before it (min
        offset - 1 when it precedes every message)."""
        ...
