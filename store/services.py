"""Background services of the store: small periodic threads with a clean stop, and their health.

Each service is a named thread that runs ``task()`` every ``interval_s`` until stopped.
A failing task is logged with its name and the exception, counted, and retried at the next
tick; it never silently disappears: :meth:`PeriodicService.health` says whether its last run
failed, and ``MessageStore.health()`` gathers every service's, which ``/healthz`` and
``/metrics`` report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("sparkmq.store")


@dataclass(frozen=True, slots=True)
class ServiceHealth:
    """One background service: ``ok`` unless its last run failed."""

    name: str
    ok: bool
    failures: int
    last_error: str | None = None


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
        #: Whether the last run raised (cleared by the next run that succeeds).
        self.failing = False

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

    def health(self) -> ServiceHealth:
        error = None if self.last_error is None else f"{type(self.last_error).__name__}: {self.last_error}"
        return ServiceHealth(self.name, not self.failing, self.failures, error)

    def run_once(self) -> None:
        try:
            self._task()
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            self.failing = True
            log.exception(
                "store service %s failed (failure #%d); retrying next tick", self.name, self.failures
            )
        else:
            self.failing = False
