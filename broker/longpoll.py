"""Long-poll without blocking the event loop.

The store calls :meth:`ArrivalHub.on_arrival` from its dispatch thread after every dispatch;
the hub hops onto the event loop with ``call_soon_threadsafe`` and resolves the futures of the
pulls waiting on that queue. A pull registers its future *before* re-reading the queue's max
offset, so an arrival can never slip between the check and the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

QueueKey = tuple[str, int]


class ArrivalHub:
    """Futures of waiting pulls, keyed by (topic, queue id), woken by store arrivals."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[QueueKey, list[tuple[int, asyncio.Future[None]]]] = {}
        self._closed = False

    # Store dispatch thread ---------------------------------------------------------------
    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Arrival listener for ``MessageStore.add_arrival_listener``; any thread."""
        if not self._waiters or self._closed:  # cheap, racy read: see the module docstring
            return
        try:
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id), max_offset)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            return

    # Event loop ---------------------------------------------------------------------------
    def _wake(self, key: QueueKey, max_offset: int) -> None:
        waiters = self._waiters.get(key)
        if not waiters:
            return
        keep = []
        for offset, future in waiters:
            if max_offset > offset:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((offset, future))
        if keep:
            self._waiters[key] = keep
        else:
            del self._waiters[key]

    def close(self) -> None:
        """Wake every waiter (shutdown); later waits return at once."""
        self._closed = True
        for waiters in self._waiters.values():
            for _, future in waiters:
                if not future.done():
                    future.set_result(None)
        self._waiters.clear()

    async def wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        timeout_s: float,
        current_max_offset: Callable[[], Awaitable[int]],
    ) -> bool:
        """Wait until the queue's max offset passes ``offset``; False on timeout or shutdown."""
        if self._closed or timeout_s <= 0:
            return False
        key = (topic, queue_id)
        future: asyncio.Future[None] = self._loop.create_future()
        entry = (offset, future)
        self._waiters.setdefault(key, []).append(entry)
        try:
            if await current_max_offset() > offset:
                return True
            try:
                await asyncio.wait_for(future, timeout_s)
            except TimeoutError:
                return False
            return not self._closed
        finally:
            waiters = self._waiters.get(key)
            if waiters is not None and entry in waiters:
                waiters.remove(entry)
                if not waiters:
                    del self._waiters[key]
