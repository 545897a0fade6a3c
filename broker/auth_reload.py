"""Reload the users file without a restart: on SIGHUP, and when the file changes.

:func:`auth_reloading` runs for the broker's lifetime. It polls the file's mtime/size every
:data:`POLL_INTERVAL_S` (one ``stat``: cheap) and reloads at once on SIGHUP (when the loop
runs in the main thread, where signal handlers can be installed). A reload parses into a new
table and swaps it; an invalid file keeps the old table and is logged once, by its field,
never its contents. Listeners of :class:`~broker.auth.DoorAuth` (the Kafka gateway) close the
connections of removed users or users whose credentials changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import AsyncIterator

from broker.auth import DoorAuth
from broker.security import ReloadOutcome
from broker.threads import run_blocking

log = logging.getLogger(__name__)

#: Seconds between two checks of the users file.
POLL_INTERVAL_S = 1.0


async def reload_once(auth: DoorAuth) -> None:
    """One check; logs counts (users, revoked) or the field of a rejected file."""
    result = await run_blocking(auth.reload_if_changed)
    if result.outcome is ReloadOutcome.RELOADED:
        log.info("users file reloaded: %d users, %d revoked", result.users, len(result.revoked))
    elif result.outcome is ReloadOutcome.REJECTED:
        log.error("users file not reloaded, keeping the previous %d users: %s", result.users, result.error)


@contextlib.asynccontextmanager
async def auth_reloading(auth: DoorAuth | None, interval_s: float = POLL_INTERVAL_S) -> AsyncIterator[None]:
    """Poll and watch SIGHUP while the block runs (nothing when auth is off)."""
    if auth is None:
        yield
        return
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()
    hup = threading.current_thread() is threading.main_thread()
    if hup:
        try:
            loop.add_signal_handler(signal.SIGHUP, wake.set)
        except (NotImplementedError, RuntimeError, ValueError):
            hup = False

    async def poll() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), interval_s)
            wake.clear()
            try:
                await reload_once(auth)
            except Exception:  # a listener's fault must not stop reloading
                log.exception("users file reload failed")

    task = asyncio.create_task(poll(), name="users-file-reload")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if hup:
            loop.remove_signal_handler(signal.SIGHUP)
