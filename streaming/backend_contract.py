"""The seam the Spark source reads through: :class:`Backend`, what a read returns, the
backends' errors, and the per-process cache of backends.

Below every backend (:mod:`streaming.backends` for a store directory and the factory,
:mod:`streaming.endpoint_backend` for one broker, :mod:`streaming.cluster_backend` for a
cluster): each imports this, none imports another above it. Import the names from
:mod:`streaming.backends`.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from store import GetStatus, SparkMQError, StoreError

#: ``{queue_id: (min_offset, max_offset)}``; max offset = next offset to be written.
QueueHeads = dict[int, tuple[int, int]]


class BackendError(StoreError):
    """The source could not talk to its store or broker (or got an answer it cannot use)."""

    code = "backend_error"
    retriable = True


class BrokerUnreachable(BackendError):
    """A broker did not answer (connection refused or reset, timeout) or answered 503."""

    code = "broker_unreachable"


class QueueElsewhere(BackendError):
    """A broker answered 307: the queue lives on another broker (a stale route)."""

    code = "queue_elsewhere"


@dataclass(frozen=True, slots=True)
class ReadChunk:
    """One read of a queue range (mirrors ``store.BatchReadResult``)."""

    status: GetStatus
    next_offset: int
    min_offset: int
    max_offset: int
    batch: pa.RecordBatch


class Backend(Protocol):
    def refresh(self) -> None:
        """Drop cached views of the store (a Spark task calls it once before reading)."""

    def topics(self) -> list[str]:
        """The user topics (no system topics), sorted; for ``subscribePattern``."""

    def queue_heads(self, topic: str) -> QueueHeads:
        """Per-queue (min, max) offsets; ``{}`` when the topic does not exist (yet)."""

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """Leftmost offset whose store time >= ``timestamp_ms`` (max offset if none)."""

    def read_range(
        self, topic: str, queue_id: int, *, offset: int, end_offset: int, max_messages: int, tags: str
    ) -> ReadChunk:
        """Read at most ``max_messages`` units of ``[offset, end_offset)``, filtered by ``tags``."""

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Store ``offsets`` (next offset to consume per queue) as ``topic@group``."""

    def owner_of(self, topic: str, queue_id: int) -> str:
        """The broker serving the queue (``""`` when one place serves every queue): planning
        groups a task's ranges by it."""

    def release_pages(self) -> None:
        """Give back the memory a task's reads mapped (a task calls it when it is done)."""


def is_backend_fault(exc: BaseException) -> bool:
    """Faults the group-offset mirror tolerates (logged, retried on the next trigger)."""
    return isinstance(exc, SparkMQError | OSError)


# -- per-process cache -------------------------------------------------------------------------

#: Backends by ``(mode, location, timeout_s, auth_token, wait_for_brokers, read_from, tls_ca)``: Spark
#: reuses its Python workers, so executor tasks keep their open StoreReaders / HTTP connection
#: pools across batches (:func:`streaming.backends.backend_for` fills it).
BACKENDS: dict[tuple[str, str, float, str | None, bool, str, str | None], Backend] = {}
BACKENDS_LOCK = threading.Lock()
