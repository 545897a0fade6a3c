"""Blocking store calls from the event loop: the one thread pool every door shares.

The store's calls block (disk I/O, the put lock). A door's coroutine runs them through
:func:`run_blocking`, which is AnyIO's worker-thread pool (the same pool and limiter Starlette
uses, so the HTTP door and the core never compete for two pools).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import anyio.to_thread

P = ParamSpec("P")
T = TypeVar("T")


async def run_blocking(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``func(*args, **kwargs)`` in a worker thread and await its result."""
    return await anyio.to_thread.run_sync(functools.partial(func, *args, **kwargs))
