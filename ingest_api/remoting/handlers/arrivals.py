"""Long polling without threads: parked pulls wait on asyncio futures that the store's
arrival listener (called on the put thread) resolves through the event loop.

``ArrivalWaiters.wait(topic, queue_id, offset, timeout_s, arrived)`` returns True as soon as the
queue's max offset passes ``offset`` (or when it already has, as far as the last arrival
said), False after the timeout. A parked pull costs one future, not one executor thread, so
thousands of idle consumers do not starve the sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable

QueueKey = tuple[str, int]


class ArrivalWaiters:
    """Futures per queue, woken by :meth:`on_arrival` from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[QueueKey, list[tuple[int, asyncio.Future[None]]]] = defaultdict(list)

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """The store's listener (put thread): hand the news to the loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id), max_offset)

    def _wake(self, key: QueueKey, max_offset: int) -> None:
        waiting = self._waiters.get(key)
        if not waiting:
            return
        still = []
        for offset, future in waiting:
            if max_offset > offset:
                if not future.done():
                    future.set_result(None)
            else:
                still.append((offset, future))
        if still:
            self._waiters[key] = still
        else:
            del self._waiters[key]

    async def wait(
        self, topic: str, queue_id: int, offset: int, timeout_s: float, arrived: Callable[[], bool]
    ) -> bool:
        """Park until a message at ``offset`` or later arrives; False on timeout.

        ``arrived()`` is asked once the waiter is registered: an arrival between the caller's
        read and this registration was announced to nobody, so it is checked directly."""
        future: asyncio.Future[None] = self._loop.create_future()
        entry = (offset, future)
        self._waiters[(topic, queue_id)].append(entry)
        try:
            if arrived():
                return True
            await asyncio.wait_for(future, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            waiting = self._waiters.get((topic, queue_id))
            if waiting and entry in waiting:
                waiting.remove(entry)
                if not waiting:
                    del self._waiters[(topic, queue_id)]
