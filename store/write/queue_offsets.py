"""Queue choice and queue offsets on the put path.

A message without a queue goes round robin (a counter per topic); one with a queue is checked
against the topic's queue count. Under the put lock each message then gets the next offset of
its queue plus its rank among this batch's messages to that queue (vectorised), and after the
append the next offset of every queue touched moves past the batch. The next offsets are read
lazily from the ConsumeQueues and cached.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from store.commitlog.dispatch_batch import queue_groups
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import UnknownQueue

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


class QueuePlacement:
    """Round-robin counters and next queue offsets; ``lock`` is the put lock."""

    def __init__(self, queues: ConsumeQueueStore, lock: threading.Lock) -> None:
        self._queues = queues
        self._lock = lock
        self._next: dict[tuple[str, int], int] = {}
        self._round_robin: dict[str, int] = {}

    def round_robin(self, topic: str, count: int, n: int) -> I32:
        """The next ``n`` round-robin queues of ``topic``."""
        with self._lock:
            first = self._round_robin.get(topic, 0)
            self._round_robin[topic] = first + n
        return ((first + np.arange(n, dtype=np.int64)) % count).astype(np.int32)

    def choose(
        self, topic: str, queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None, count: int, n: int
    ) -> I32:
        """Queues for ``n`` messages: round robin when ``queue_ids`` is None, else checked."""
        if queue_ids is None:
            return self.round_robin(topic, count, n)
        qids = np.broadcast_to(np.asarray(queue_ids, dtype=np.int64), (n,))
        bad = (qids < 0) | (qids >= count)
        if bool(bad.any()):
            first_bad = int(np.flatnonzero(bad)[0])
            raise UnknownQueue(
                f"message {first_bad}: queue {int(qids[first_bad])} does not exist: "
                f"topic {topic!r} has {count} queues"
            )
        return qids.astype(np.int32)

    def choose_one(self, topic: str, queue_id: int | None, count: int) -> int:
        if queue_id is None:
            return int(self.round_robin(topic, count, 1)[0])
        if not 0 <= queue_id < count:
            raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")
        return queue_id

    def _next_offset(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        nxt = self._next.get(key)
        if nxt is None:
            cq = self._queues.get(topic, queue_id)
            nxt = 0 if cq is None else cq.max_offset
            self._next[key] = nxt
        return nxt

    def assign(self, topics: tuple[str, ...], topic_codes: I32, queue_ids: I32) -> I64:
        """Per message: next offset of its queue + its rank among this batch's messages to it.
        Call with the put lock held."""
        n = len(queue_ids)
        if n == 0 or _one_queue(topic_codes, queue_ids):
            base = self._next_offset(topics[int(topic_codes[0])], int(queue_ids[0])) if n else 0
            return base + np.arange(n, dtype=np.int64)
        order, group_starts = queue_groups(topic_codes, queue_ids)
        counts = np.diff(np.append(group_starts, n))
        heads = order[group_starts]
        bases = np.array(
            [
                self._next_offset(topics[code], qid)
                for code, qid in zip(topic_codes[heads].tolist(), queue_ids[heads].tolist(), strict=True)
            ],
            dtype=np.int64,
        )
        ranks = np.arange(n, dtype=np.int64) - np.repeat(group_starts, counts)
        out = np.empty(n, dtype=np.int64)
        out[order] = np.repeat(bases, counts) + ranks
        return out

    def commit(self, topics: tuple[str, ...], lasts: Iterable[tuple[int, int, int]]) -> None:
        """The batch is appended: move each queue's next offset past its last queue offset
        (``lasts`` from :func:`last_per_queue`; put lock held)."""
        for code, qid, last in lasts:
            self._next[(topics[code], qid)] = last + 1

    def forget_topic(self, topic: str) -> None:
        """Drop the bookkeeping of a deleted topic (put lock held)."""
        for key in [k for k in self._next if k[0] == topic]:
            del self._next[key]
        self._round_robin.pop(topic, None)

    def reset(self) -> None:
        """Re-read next queue offsets from the ConsumeQueues (after a rebuild)."""
        self._next.clear()


def last_per_queue(topic_codes: I32, queue_ids: I32, values: I64) -> list[tuple[int, int, int]]:
    """(topic code, queue id, value of its last message) for each distinct queue of a batch."""
    n = len(queue_ids)
    if n == 0:
        return []
    if _one_queue(topic_codes, queue_ids):
        return [(int(topic_codes[0]), int(queue_ids[0]), int(values[-1]))]
    order, starts = queue_groups(topic_codes, queue_ids)
    last = order[np.append(starts[1:], n) - 1]
    return list(zip(topic_codes[last].tolist(), queue_ids[last].tolist(), values[last].tolist(), strict=True))


def _one_queue(topic_codes: I32, queue_ids: I32) -> bool:
    """Every row goes to the first row's queue (a non-empty batch)."""
    return bool(np.all(queue_ids == queue_ids[0])) and bool(np.all(topic_codes == topic_codes[0]))
