"""The broker's delay wheel: relocates each "due at T" decision at T, never early, exactly once.

The delay resolver (``streaming/operators/delay.py``) decides a window ahead; the broker writes
each decision as a record of ``rmq_sys_wheel_due`` (:mod:`store.publish.wheel_log`) and hands it
to this wheel. The wheel is one thread with a heap of (due ms, queue offset): it sleeps until the
earliest due time (the store's clock, so never early), relocates every decision due by then
through the exactly-once relocation publish, then appends one progress record naming what it
published. So the resolver's micro-batch cost no longer adds to lateness: only the wheel's
wake-up and one append do.

* **Crash** (``kill -9`` of the broker): at the next start the wheel reads the newest progress
  record and every decision above its watermark not marked, and publishes them *with resume*
  (records already relocated after the decision record are skipped); overdue ones go at once.
* **Failover**: the wheel runs only while ``should_run()`` (a lone broker always; in a replica
  group while this member is the master, its store included: :func:`wheel_may_run`). A member
  that starts to lead loads the decisions it replicated as a slave, the same way: what the old
  master had relocated is found and skipped.
* A publish that fails (a store fault, the store not writable yet) is retried a second later.
"""

from __future__ import annotations

import heapq
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

from broker.threads import run_blocking
from store import StoreError
from store.ha import Role
from store.publish import Progress, Scheduled, WheelLog

log = logging.getLogger("sparkmq.operators")

#: The longest the thread sleeps without looking at ``should_run`` and its heap (seconds).
MAX_SLEEP_S = 0.5
#: Back-off after a failed publish or load (seconds).
RETRY_S = 1.0

Observer = Callable[[str, int, npt.NDArray[np.int64]], None]


class DelayWheel:
    """Decisions waiting for their due time (see the module docstring). Thread-safe."""

    def __init__(
        self,
        wheel_log: WheelLog,
        clock_ms: Callable[[], int],
        *,
        observe: Observer | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """``observe(operator, appended, due ms of each)`` after each publish; ``on_event(name)``
        after each step (``wheel-published``, ``wheel-marked``): a seam for crash tests."""
        self.log = wheel_log
        self.clock_ms = clock_ms
        self.observe = observe
        self.on_event = on_event
        self.should_run: Callable[[], bool] = lambda: True
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int]] = []
        self._items: dict[int, Scheduled] = {}
        self._watermark = 0
        self._done: set[int] = set()
        self._loaded = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        #: Decisions published since start (for tests and /operators).
        self.published_total = 0
        #: Decisions taken from the log since start (at start, or on leading after a failover),
        #: not those already handed over by the batch that wrote them.
        self.loaded_total = 0
        #: Records appended by decisions read back from the log (or retried after a failed
        #: publish): what a restart or a failover delivered from the replayed decisions.
        self.replayed_total = 0

    # -- the API ---------------------------------------------------------------------------
    def schedule(self, items: Iterable[Scheduled]) -> None:
        """Hand over decisions just written (before :meth:`start` too: a load dedupes)."""
        with self._cond:
            for item in items:
                self._add(item)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._items)

    def next_due_ms(self) -> int | None:
        with self._cond:
            return self._heap[0][0] if self._heap else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="delay-wheel", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    # -- the thread ------------------------------------------------------------------------
    def _add(self, item: Scheduled) -> bool:
        """Hold ``item`` unless it is held or published already; whether it was added."""
        offset = item.queue_offset
        if offset in self._items or offset < self._watermark or offset in self._done:
            return False
        self._items[offset] = item
        heapq.heappush(self._heap, (item.decision.due_ms, offset))
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
            if not self.should_run():
                self._drop()
                self._wait(MAX_SLEEP_S)
                continue
            if not self._loaded and not self._load():
                self._wait(RETRY_S)
                continue
            due = self._take_due()
            if not due:
                continue
            failed = self._publish(due)
            if failed:
                self._wait(RETRY_S)

    def _wait(self, seconds: float) -> None:
        with self._cond:
            if not self._stopping:
                self._cond.wait(seconds)

    def _drop(self) -> None:
        """Not the master (any more): forget what is held; a new lead loads it again."""
        with self._cond:
            if self._loaded or self._items:
                log.info("wheel: paused (not the master); %d decision(s) left to the log", len(self._items))
            self._heap, self._items, self._done, self._loaded = [], {}, set(), False

    def _load(self) -> bool:
        try:
            progress, outstanding = self.log.load()
        except (StoreError, OSError) as exc:
            log.error("wheel: could not load its decisions: %s", exc)
            return False
        with self._cond:
            self._watermark = max(self._watermark, progress.watermark)
            self._done |= {o for o in progress.done if o >= self._watermark}
            self.loaded_total += sum(self._add(item) for item in outstanding)
            self._loaded = True
            count = len(self._items)
        if outstanding:
            log.info("wheel: %d decision(s) outstanding after start or failover", count)
        return True

    def _take_due(self) -> list[Scheduled]:
        """Every decision due by now (never before its time); waits for the earliest else."""
        with self._cond:
            now = self.clock_ms()
            due: list[Scheduled] = []
            while self._heap and self._heap[0][0] <= now:
                _, offset = heapq.heappop(self._heap)
                item = self._items.get(offset)
                if item is not None:
                    due.append(item)
            if not due and not self._stopping:
                wait_ms = (self._heap[0][0] - now) if self._heap else MAX_SLEEP_S * 1000
                self._cond.wait(min(wait_ms / 1000, MAX_SLEEP_S))
            return due

    def _publish(self, due: list[Scheduled]) -> bool:
        """Relocate ``due`` and mark them; True when something failed (retried later)."""
        published: list[int] = []
        failed = False
        for item in due:
            try:
                appended, due_ms = self.log.publish(item)
            except (StoreError, OSError) as exc:
                log.error("wheel: publishing decision %d failed (retried): %s", item.queue_offset, exc)
                with self._cond:  # partly written, maybe: resume next time
                    retry = Scheduled(item.queue_offset, item.commitlog_offset, item.decision, recovered=True)
                    self._items[item.queue_offset] = retry
                    heapq.heappush(self._heap, (item.decision.due_ms, item.queue_offset))
                failed = True
                continue
            published.append(item.queue_offset)
            self.published_total += 1
            if item.recovered:
                self.replayed_total += appended
            if self.observe is not None:
                self.observe(item.decision.operator, appended, due_ms)
            self._event("wheel-published")
        if published:
            self._mark(published)
        return failed

    def _mark(self, published: list[int]) -> None:
        with self._cond:
            for offset in published:
                self._items.pop(offset, None)
                self._done.add(offset)
            while self._watermark in self._done:
                self._done.remove(self._watermark)
                self._watermark += 1
            progress = Progress(self._watermark, tuple(sorted(self._done)))
        try:
            self.log.mark(progress)
        except (StoreError, OSError) as exc:  # a lost mark costs a resume check, not a duplicate
            log.error("wheel: could not record its progress: %s", exc)
        self._event("wheel-marked")

    def _event(self, name: str) -> None:
        if self.on_event is not None:
            self.on_event(name)


def wheel_may_run(cluster: Any, replica: Any) -> bool:
    """Whether the wheel runs now: on a lone broker always; on a cluster member while it serves
    its broker name (``cluster.serving``: its replica group's master in the ZooKeeper view) and,
    in a replica group, once its store (``replica``, a ``store.ha.ReplicaController``) is master
    too. The view names a new master a moment before ``become_master`` has ended (dispatched the
    replicated tail, moved the confirm offset to the end of the log): a wheel that loaded then
    would see only the decisions below the slave's last confirm offset, and never the rest."""
    if cluster is None:
        return True
    if not cluster.serving:
        return False
    return replica is None or replica.role is Role.MASTER


@asynccontextmanager
async def wheel_service(broker: Any) -> AsyncIterator[DelayWheel | None]:
    """The broker's wheel for its lifetime (entered by the lifecycle after relocation recovery):
    running only while this broker serves (a lone broker, or its replica group's master)."""
    board = broker.operators
    wheel = getattr(board, "wheel", None) if board is not None else None
    if wheel is None:
        yield None
        return
    wheel.should_run = lambda: wheel_may_run(broker.cluster, broker.replica)
    wheel.start()
    try:
        yield wheel
    finally:
        await run_blocking(wheel.stop)
