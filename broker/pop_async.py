"""POP receive for asyncio doors: long-poll on the event loop, not in a worker thread.

``PopService.receive`` with a wait parks its calling thread until a message comes. An asyncio
door (HTTP, gRPC) shares one small worker pool (AnyIO's, ~40 threads), so a few dozen waiting
consumers would starve every other request. :class:`AsyncPop` therefore polls the service
*without waiting* in a worker thread and does the waiting on the event loop:

1. register a future for the receive's wake-up topics (``""``, the topic, the group's retry
   topic) *before* polling, so a wake-up between the poll and the wait is not lost;
2. poll: ``receive(..., wait_ms=0)`` in a worker thread (a few store reads and one append);
3. with nothing handed out, await the future up to the time left (capped at the service's
   expiry tick, the same bound its own long poll uses), and poll again.

The service calls :meth:`AsyncPop._on_wake` from any thread (an arrival in the store's
dispatch thread, an ack, the expiry thread at a visible-at); it hops onto the loop with
``call_soon_threadsafe``. The gRPC door uses the same object (``broker.pop_async``).
"""

from __future__ import annotations

import asyncio
import contextlib

from broker.pop import InvalidWaitTime, PopService, Received
from broker.threads import run_blocking
from store import retry_topic


class AsyncPop:
    """Event-loop long polls over one :class:`PopService` (one per broker, like the service)."""

    def __init__(self, pop: PopService, loop: asyncio.AbstractEventLoop) -> None:
        self.pop = pop
        self._loop = loop
        #: Waiting receives: future -> the topics that wake it.
        self._waiters: dict[asyncio.Future[None], tuple[str, ...]] = {}
        self._closed = False
        pop.add_wake_listener(self._on_wake)

    def close(self) -> None:
        """Release every waiting receive (they answer what they have: nothing)."""
        self._closed = True
        self.pop.remove_wake_listener(self._on_wake)
        self._wake_all("")

    # any thread ------------------------------------------------------------------------
    def _on_wake(self, topic: str) -> None:
        if not self._waiters or self._closed:  # cheap, racy read: registration precedes polls
            return
        try:
            self._loop.call_soon_threadsafe(self._wake_all, topic)
        except RuntimeError:  # the loop is closed: nobody waits any more
            return

    # event loop ------------------------------------------------------------------------
    def _wake_all(self, topic: str) -> None:
        for future, topics in list(self._waiters.items()):
            if (topic == "" or topic in topics) and not future.done():
                future.set_result(None)

    async def receive(
        self,
        group: str,
        topic: str,
        max_messages: int,
        invisible_ms: int,
        wait_ms: int,
        tag_expression: str | None = None,
    ) -> list[Received]:
        """``PopService.receive`` with its wait spent on the event loop: up to ``max_messages``
        messages, or an empty list after ``wait_ms`` (ms) with none. Raises the service's
        errors (``InvalidWaitTime`` for a wait outside ``[0, max_wait_ms]``)."""
        if not 0 <= wait_ms <= self.pop.config.max_wait_ms:
            raise InvalidWaitTime(f"wait_ms must be in [0, {self.pop.config.max_wait_ms}], got {wait_ms}")
        deadline = self._loop.time() + wait_ms / 1000
        tick_s = self.pop.config.expiry_tick_ms / 1000
        topics = (topic, retry_topic(group))
        while True:
            future: asyncio.Future[None] = self._loop.create_future()
            self._waiters[future] = topics
            try:
                got = await run_blocking(
                    self.pop.receive, group, topic, max_messages, invisible_ms, 0, tag_expression
                )
                remaining = deadline - self._loop.time()
                if got or remaining <= 0 or self._closed or self.pop.closed:
                    return got
                with contextlib.suppress(TimeoutError):  # a tick: poll again
                    await asyncio.wait_for(future, min(remaining, tick_s))
            finally:
                del self._waiters[future]

    @property
    def waiting(self) -> int:
        """Receives waiting on the loop now (for metrics and tests)."""
        return len(self._waiters)
