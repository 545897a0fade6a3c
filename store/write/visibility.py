"""What readers may see of a replicated store: records that end at or below the confirm offset.

A lone store (``StoreConfig.replicated`` off) has no bound: every record is visible as soon as
its put returns, and arrival notices go out at once. A replica's bound is its *confirm offset*,
the CommitLog offset every in-sync replica holds (RocketMQ 5 ``confirmOffset``): the master
moves it as the in-sync slaves acknowledge, a slave takes it from the master's frames. Readers
(:class:`~store.read.queue_reader.QueueReader`: pulls, queue max offsets, long-polls) see a
queue up to its last unit whose record ends at or below the bound, so a batch read now is the
same batch on whichever replica becomes master later.

Arrival notices follow the bound: a put's ``(topic, queue, max offset)`` notices are held
until the confirm offset covers the put, then released (smallest end offset first). Every move of the
confirm offset is written in place into the checkpoint (``confirmPhyOffset``), which is how
read-only followers in other processes learn it.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable

from store.write.arrivals import Arrivals

Grown = tuple[str, int, int]


class Visibility:
    """The confirm offset of a store and the arrival notices waiting for it; thread-safe."""

    def __init__(
        self, arrivals: Arrivals, persist: Callable[[int], None], confirm_offset: int | None
    ) -> None:
        """``confirm_offset`` None: a lone store (no bound). ``persist(offset)`` records each
        move where followers read it (the checkpoint)."""
        self._arrivals = arrivals
        self._persist = persist
        self._lock = threading.Lock()
        self._confirm = confirm_offset
        #: Heap of (end offset of a put, arrival order, its notices).
        self._held: list[tuple[int, int, list[Grown]]] = []
        self._order = itertools.count()

    @property
    def bound(self) -> int | None:
        """The confirm offset readers are bounded by; None for a lone store."""
        return self._confirm

    def published(self, end_offset: int, grown: Iterable[Grown]) -> None:
        """Records ending at ``end_offset`` were appended and dispatched: tell waiters now, or
        when the confirm offset reaches ``end_offset``."""
        with self._lock:
            confirm = self._confirm
            if confirm is not None and end_offset > confirm:
                heapq.heappush(self._held, (end_offset, next(self._order), list(grown)))
                return
        self._arrivals.notify(grown)

    def advance(self, confirm_offset: int) -> None:
        """Move the confirm offset forward (never back: use :meth:`lower`) and release the
        notices it now covers."""
        released: list[Grown] = []
        with self._lock:
            if self._confirm is not None and confirm_offset <= self._confirm:
                return
            self._confirm = confirm_offset
            self._persist(confirm_offset)
            while self._held and self._held[0][0] <= confirm_offset:
                released.extend(heapq.heappop(self._held)[2])
        if released:
            self._arrivals.notify(released)

    def lower(self, confirm_offset: int) -> None:
        """A truncation at ``confirm_offset``: the bound may not exceed the log any more, and
        notices of records beyond it are dropped (those records are gone)."""
        with self._lock:
            if self._confirm is None or self._confirm > confirm_offset:
                self._confirm = confirm_offset
                self._persist(confirm_offset)
            self._held = [held for held in self._held if held[0] <= confirm_offset]
            heapq.heapify(self._held)
