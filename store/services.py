"""Background services of the store: small periodic threads with a clean stop.

Each service is a named thread that runs ``task()`` every ``interval_s`` until stopped.
A failing task is logged with its name and the exception, counted, and retried at the next
tick; it never silently disappears (``failures`` and ``last_error`` are observable).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("sparkmq.store")


class PeriodicService:
    """Run ``task`` every ``interval_s`` seconds on a daemon thread."""

    def __init__(self, name: str, interval_s: float, task: Callable[[], object]) -> None:
        self.name = name
        self.interval_s = interval_s
        self._task = task
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.last_error: BaseException | None = None

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"sparkmq-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.run_once()

    def run_once(self) -> None:
        try:
            self._task()
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            log.exception(
                "store service %s failed (failure #%d); retrying next tick", self.name, self.failures
            )
