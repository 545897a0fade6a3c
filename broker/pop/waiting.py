"""A POP receive that long-polls on the event loop (the doors on asyncio: gRPC, HTTP).

:meth:`PopService.receive` with ``wait_ms > 0`` parks its calling thread on a condition until
something arrives; a door serving many long polls from one event loop must not lend a thread
to each. :func:`receive_waiting` instead tries a receive that does not wait (on a worker
thread, a few milliseconds), and between tries awaits an :class:`asyncio.Event` that the
service's wake listener sets from whatever thread woke it: an arrival on the topic or on the
group's retry topic, an ack (a FIFO group's next message), an expiry, the service closing. A
try also comes every ``PopService.config.expiry_tick_ms`` without a wake, as the blocking
receive does, so nothing waits longer than a tick past its visible time.

Validation happens in the first try: a bad argument raises before any wait, as the service's
own receive does.
"""

from __future__ import annotations

import asyncio
import contextlib

from broker.pop.service import PopService
from broker.pop.values import Received
from broker.threads import run_blocking
from store import retry_topic


async def receive_waiting(
    pop: PopService,
    group: str,
    topic: str,
    max_messages: int,
    invisible_ms: int,
    wait_ms: int,
    tag_expression: str | None = None,
) -> list[Received]:
    """Up to ``max_messages`` messages of ``topic`` for ``group`` (as :meth:`PopService.receive`);
    with none to hand out, wait up to ``wait_ms`` on the event loop. An empty list when none came.

    Raises what :meth:`PopService.receive` raises (``InvalidMaxMessages``, ``InvalidInvisibleTime``,
    ``GroupKindConflict``, ``NotMaster`` on a replica, ...)."""
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    interests = {"", topic, retry_topic(group)}

    def on_wake(woken_topic: str) -> None:
        if woken_topic in interests:
            # RuntimeError: the loop closed under a late wake, and nobody waits any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(woken.set)

    deadline = loop.time() + wait_ms / 1000
    tick_s = pop.config.expiry_tick_ms / 1000
    pop.add_wake_listener(on_wake)
    try:
        while True:
            woken.clear()  # a wake during the try below makes the wait after it return at once
            got = await run_blocking(pop.receive, group, topic, max_messages, invisible_ms, 0, tag_expression)
            remaining = deadline - loop.time()
            if got or remaining <= 0 or pop.closed:
                return got
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), timeout=min(remaining, tick_s))
    finally:
        pop.remove_wake_listener(on_wake)
