"""Idempotent produce: a retried request returns the original results instead of writing twice.

A request carries a :class:`ProducerRef` ``(producer_id, sequence)``. Message ``i`` of the
request is stored with a *deterministic* UNIQ_KEY derived from ``(producer_id, sequence, i)``
(:func:`request_uniq_keys`). The CommitLog therefore records, in the messages themselves,
which requests it holds, and the key index (rebuilt from the CommitLog by recovery) finds
them again after a restart: the durable dedupe state is the data, nothing else is persisted.

On top of that, :class:`ProducerTable` keeps the results of recent requests in memory (LRU,
bounded by ``max_producers`` x ``requests_per_producer``) so that quick retries cost nothing.
Any other request costs one index lookup (its first message's UNIQ_KEY). There is deliberately
no "higher sequence means new" shortcut: after a restart nothing proves that a producer's
higher sequences were not stored before it (a pipelining client may have sent them first).

A request torn by a crash (its first messages stored, the rest not) is completed by the retry:
only the missing messages are written. Dedupe reaches back as far as retention keeps data.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from store.errors import InvalidArgument

MAX_PRODUCER_ID_CHARS = 256
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ProducerRef:
    """Identifies one produce request: retries of it must use the same values."""

    producer_id: str
    sequence: int = 0

    def validate(self) -> ProducerRef:
        if not self.producer_id or len(self.producer_id) > MAX_PRODUCER_ID_CHARS:
            raise InvalidArgument(f"producer id must be 1-{MAX_PRODUCER_ID_CHARS} characters")
        if not 0 <= self.sequence < 2**63:
            raise InvalidArgument(f"producer sequence must be in [0, 2**63), got {self.sequence}")
        return self


def request_uniq_keys(ref: ProducerRef, count: int) -> list[str]:
    """The UNIQ_KEYs of the ``count`` messages of request ``ref`` (32 upper-case hex chars)."""
    prefix = hashlib.blake2b(f"{ref.producer_id}\x00{ref.sequence}".encode(), digest_size=12).hexdigest()
    head = prefix.upper()  # 24 hex chars, then the message's index as 8
    return [f"{head}{i:08X}" for i in range(count)]


def prefix_end(count: int, present: Callable[[int], bool]) -> int:
    """How many leading messages of an earlier attempt of a request are stored.

    An attempt is all-or-nothing while the store runs; only a crash can tear it, and then a
    prefix survives (records are appended in order). So: look up the first and the last
    message, then binary-search the end of the stored prefix (O(log n) lookups).
    """
    if count == 0 or not present(0):
        return 0
    if present(count - 1):
        return count
    lo, hi = 0, count - 1  # present(lo); not present(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if present(mid) else (lo, mid)
    return hi


def stored_prefix(count: int, lookup: Callable[[int], T | None]) -> dict[int, T]:
    """Which messages of an earlier attempt of a request are stored: ``{index: result}``
    (:func:`prefix_end`, then the prefix fetched; a gap inside it ends it there)."""
    found: dict[int, T] = {}

    def present(i: int) -> bool:
        hit = lookup(i)
        if hit is not None:
            found[i] = hit
        return hit is not None

    end = prefix_end(count, present)
    prefix: dict[int, T] = {}
    for i in range(end):
        hit = found[i] if i in found else lookup(i)
        if hit is None:  # not a prefix after all: treat the rest as missing
            break
        prefix[i] = hit
    return prefix


class ProducerTable:
    """Recent request results and the highest sequence per producer (thread-safe, bounded)."""

    def __init__(self, max_producers: int = 100_000, requests_per_producer: int = 8) -> None:
        self._max_producers = max_producers
        self._per_producer = requests_per_producer
        self._lock = threading.Lock()
        self._producers: OrderedDict[str, _ProducerState] = OrderedDict()
        self._request_locks: dict[str, threading.Lock] = {}

    def request_lock(self, producer_id: str) -> threading.Lock:
        """Serialises requests of one producer (a retry racing its original)."""
        with self._lock:
            lock = self._request_locks.get(producer_id)
            if lock is None:
                if len(self._request_locks) > 4 * self._max_producers:
                    self._request_locks = {p: lk for p, lk in self._request_locks.items() if lk.locked()}
                lock = self._request_locks[producer_id] = threading.Lock()
            return lock

    def recent(self, ref: ProducerRef) -> object | None:
        with self._lock:
            state = self._producers.get(ref.producer_id)
            if state is None:
                return None
            self._producers.move_to_end(ref.producer_id)
            return state.results.get(ref.sequence)

    def remember(self, ref: ProducerRef, results: object) -> None:
        with self._lock:
            state = self._producers.get(ref.producer_id)
            if state is None:
                state = self._producers[ref.producer_id] = _ProducerState()
                while len(self._producers) > self._max_producers:
                    self._producers.popitem(last=False)
            self._producers.move_to_end(ref.producer_id)
            state.results[ref.sequence] = results
            while len(state.results) > self._per_producer:
                state.results.popitem(last=False)

    def __len__(self) -> int:
        return len(self._producers)


class _ProducerState:
    __slots__ = ("results",)

    def __init__(self) -> None:
        self.results: OrderedDict[int, object] = OrderedDict()
