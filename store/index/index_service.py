"""The index thread: builds the key index from dispatch batches, behind the put path.

The put path hands every :class:`~store.commitlog.dispatch_batch.DispatchBatch` over and returns; the
index may lag by a few batches and catches up. :meth:`IndexDispatcher.wait_indexed` lets
queries see every write acknowledged before they started. Without a thread (``threaded=False``,
used when background services are off) batches are indexed inline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from store.commitlog.dispatch_batch import DispatchBatch
from store.index.index_file import IndexService

log = logging.getLogger("sparkmq.store")

#: Most queued dispatch batches indexed together.
_MAX_COALESCED = 1024


class IndexDispatcher:
    def __init__(self, index: IndexService, indexed_to: int) -> None:
        self.index = index
        self._queue: queue.Queue[DispatchBatch | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._indexed_to = indexed_to
        self.failures = 0

    @property
    def indexed_to(self) -> int:
        """CommitLog offset up to which every record is in the index."""
        return self._indexed_to

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sparkmq-index", daemon=True)
        self._thread.start()

    def stop(self, drain: bool = True) -> None:
        """Stop the thread; with ``drain`` every queued batch is indexed first."""
        if self._thread is None:
            return
        if not drain:
            while not self._queue.empty():
                self._queue.get_nowait()
        self._queue.put(None)
        self._thread.join(30)
        self._thread = None

    def dispatch(self, batch: DispatchBatch) -> None:
        if self._thread is None:
            self._index(batch)
        else:
            self._queue.put(batch)

    def wait_indexed(self, target: int, timeout_s: float) -> bool:
        """Block until everything before CommitLog offset ``target`` is indexed."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._indexed_to < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _loop(self) -> None:
        """Index everything queued at once: many small puts cost one dispatch, not one each."""
        while True:
            pending = [self._queue.get()]
            while len(pending) < _MAX_COALESCED:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batches = [b for b in pending if b is not None]
            if batches:
                self._index(DispatchBatch.concat(batches))
            if len(batches) < len(pending):  # the stop marker
                return

    def _index(self, batch: DispatchBatch) -> None:
        try:
            self.index.dispatch(batch)
        except Exception:
            self.failures += 1
            log.exception(
                "index dispatch failed for %d record(s) at %d; recovery rebuilds them",
                len(batch),
                int(batch.commitlog_offsets[0]),
            )
        with self._cond:
            self._indexed_to = max(self._indexed_to, batch.end_offset)
            self._cond.notify_all()
