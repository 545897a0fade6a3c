"""Arrival notification: long-polls and listeners learn that a queue grew.

After every put the appender calls :meth:`Arrivals.notify`; waiters blocked in
:meth:`Arrivals.wait_for` re-check their queue, and listeners (e.g. an asyncio long-poll hub
that hops to its loop with ``call_soon_threadsafe``) get ``(topic, queue_id, max_offset)``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("sparkmq.store")

ArrivalListener = Callable[[str, int, int], None]


class Arrivals:
    def __init__(self, max_offset: Callable[[str, int], int]) -> None:
        self._max_offset = max_offset
        self._cond = threading.Condition()
        self._listeners: list[ArrivalListener] = []
        self._closed = False

    def add_listener(self, listener: ArrivalListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: ArrivalListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def notify(self, grown: Iterable[tuple[str, int, int]]) -> None:
        """``grown``: (topic, queue id, new max offset) of every queue a put appended to."""
        with self._cond:
            self._cond.notify_all()
        if not self._listeners:
            return
        for topic, queue_id, max_offset in grown:
            for listener in list(self._listeners):
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("arrival listener %r failed", listener)

    def close(self) -> None:
        """Release every waiter (they return False)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_for(self, topic: str, queue_id: int, offset: int, timeout_s: float) -> bool:
        """Block until the queue's max offset passes ``offset`` (True) or the timeout (False)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._max_offset(topic, queue_id) <= offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._cond.wait(remaining)
        return True
