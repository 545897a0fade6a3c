"""SYNC_FLUSH group commit (RocketMQ ``GroupCommitService``).

A writer appends, then calls :meth:`GroupCommitService.wait_flushed` with the CommitLog
offset its records end at. One flusher thread fsyncs on behalf of every writer waiting at
that moment, so concurrent puts share a single fsync. A put returns only after its bytes
are on disk, or fails with :class:`~store.errors.FlushTimeout`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from store.errors import FlushTimeout, StoreNotWritable
from store.services import ServiceHealth

log = logging.getLogger("sparkmq.store")


class GroupCommitService:
    def __init__(self, flush: Callable[[], int], initial_flushed_offset: int) -> None:
        """``flush()`` fsyncs everything written so far and returns the flushed offset."""
        self._flush = flush
        self._cond = threading.Condition()
        self._requested = initial_flushed_offset
        self._flushed = initial_flushed_offset
        self._error: BaseException | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="sparkmq-group-commit", daemon=True)
        self.fsyncs = 0
        self.failures = 0
        self._last_error: BaseException | None = None

    def health(self) -> ServiceHealth:
        last = self._last_error
        error = None if last is None else f"{type(last).__name__}: {last}"
        return ServiceHealth("group-commit", self._error is None, self.failures, error)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self._thread.join(10)

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def wait_flushed(self, offset: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self._flushed < offset:
                if self._error is not None:
                    raise StoreNotWritable(f"fsync of the CommitLog failed: {self._error}") from self._error
                if self._stopped:
                    raise StoreNotWritable("store is closing; flush was not confirmed")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise FlushTimeout(
                        f"CommitLog not fsynced to offset {offset} within {timeout_s * 1000:.0f} ms "
                        f"(flushed to {self._flushed})"
                    )
                self._cond.wait(remaining)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._requested <= self._flushed and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
            try:
                flushed = self._flush()
                error: BaseException | None = None
            except OSError as exc:
                log.exception("group commit fsync failed")
                flushed, error = self._flushed, exc
            with self._cond:
                self.fsyncs += 1
                self._flushed = max(self._flushed, flushed)
                self._error = error
                if error is not None:
                    self.failures += 1
                    self._last_error = error
                self._cond.notify_all()
            if error is not None:
                time.sleep(0.05)  # back off before retrying a failing disk
