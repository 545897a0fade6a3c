"""The index thread: builds the key index from dispatch batches, behind the put path.

The put path hands every :class:`~store.commitlog.dispatch_batch.DispatchBatch` over and returns; the
index may lag by a few batches and catches up. :meth:`IndexDispatcher.wait_indexed` lets
queries see every write acknowledged before they started. Without a thread (``threaded=False``,
used when background services are off) batches are indexed inline.

A batch that fails to index is never skipped: ``indexed_to`` stays before it, the thread retries
it (with back-off, together with what arrived meanwhile; indexing is idempotent) and
:meth:`IndexDispatcher.health` reports the failure. So a lookup that waits for the index (an
idempotent retry, a sink resuming its publish) waits or is refused, and never misses a
message that is stored but not indexed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from store.commitlog.dispatch_batch import DispatchBatch
from store.index.index_file import IndexService
from store.services import ServiceHealth

log = logging.getLogger("sparkmq.store")

#: Most queued dispatch batches indexed together.
_MAX_COALESCED = 1024
#: Back-off between retries of a batch that failed to index (doubling, seconds).
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 5.0


class IndexDispatcher:
    def __init__(self, index: IndexService, indexed_to: int) -> None:
        self.index = index
        self._queue: queue.Queue[DispatchBatch | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._indexed_to = indexed_to
        self.failures = 0
        self.last_error: BaseException | None = None
        #: The last attempt to index failed; ``indexed_to`` is held before the failed batch.
        self.failing = False
        #: Without a thread: the batch that failed, retried with the next one.
        self._unindexed: DispatchBatch | None = None

    @property
    def indexed_to(self) -> int:
        """CommitLog offset up to which every record is in the index."""
        return self._indexed_to

    def health(self) -> ServiceHealth:
        error = None if self.last_error is None else f"{type(self.last_error).__name__}: {self.last_error}"
        return ServiceHealth("index", not self.failing, self.failures, error)

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
        if self._thread is not None:
            self._queue.put(batch)
            return
        if self._unindexed is not None:  # inline: retry what failed before, then this batch
            batch = DispatchBatch.concat([self._unindexed, batch])
        self._unindexed = None if self._index(batch) else batch

    def wait_indexed(self, target: int, timeout_s: float) -> bool:
        """Block until everything before CommitLog offset ``target`` is indexed (False when
        ``timeout_s`` passes first, e.g. while indexing keeps failing)."""
        if self._thread is None:  # inline: nothing else will move it
            if self._unindexed is not None:
                batch, self._unindexed = self._unindexed, None
                self.dispatch(batch)
            return self._indexed_to >= target
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._indexed_to < target:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _loop(self) -> None:
        """Index everything queued at once: many small puts cost one dispatch, not one each. A
        batch that failed is retried (with what arrived meanwhile) after a growing pause."""
        retry: DispatchBatch | None = None
        pause = _RETRY_FIRST_S
        while True:
            try:
                pending = [self._queue.get(timeout=pause if retry is not None else None)]
            except queue.Empty:
                pending = []
            while len(pending) < _MAX_COALESCED:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batches = ([retry] if retry is not None else []) + [b for b in pending if b is not None]
            stopping = None in pending
            if batches:
                batch = DispatchBatch.concat(batches) if len(batches) > 1 else batches[0]
                retry = None if self._index(batch) else batch
                pause = _RETRY_FIRST_S if retry is None else min(pause * 2, _RETRY_MAX_S)
            if stopping:
                if retry is not None:
                    log.error(
                        "index thread stopping with %d record(s) not indexed: recovery rebuilds them",
                        len(retry),
                    )
                return

    def _index(self, batch: DispatchBatch) -> bool:
        """Index ``batch``; True on success (``indexed_to`` moves past it), False on failure."""
        try:
            self.index.dispatch(batch)
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            self.failing = True
            log.exception(
                "index dispatch failed for %d record(s) at %d (failure #%d); retrying, lookups wait",
                len(batch),
                int(batch.commitlog_offsets[0]),
                self.failures,
            )
            return False
        self.failing = False
        with self._cond:
            self._indexed_to = max(self._indexed_to, batch.end_offset)
            self._cond.notify_all()
        return True
