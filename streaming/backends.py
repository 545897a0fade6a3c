"""Where the Spark source gets its data: a store directory, a broker, or every broker of a cluster.

:class:`Backend` is the small seam the source needs — queue heads, offset-for-timestamp, an
Arrow read of a queue range and the group-offset commit. Three implementations return
identical rows:

* :class:`PathBackend` reads a store directory with the lock-free :class:`store.read.store_reader.StoreReader`
  (ConsumeQueue + CommitLog files, mmap'd). Group offsets have to go through the store's
  *owner* (only it may write ``consumerOffset.json``): see :class:`PathBackend.commit_group_offsets`.
* :class:`EndpointBackend` talks to ``sparkmq serve`` over HTTP; message ranges arrive as
  Arrow IPC streams (no Python object per message). The bulk pulls go through
  :class:`ArrowPuller` (the stdlib's ``http.client``, one keep-alive connection per thread),
  which reads a known-length body in one C-level loop: 1.6x the rows/s of httpx for 50k-row
  pages on this machine (bench/http_bench.py); the small JSON calls use httpx.
* :class:`streaming.cluster_backend.ClusterBackend` takes any broker as its entry point, finds
  each queue's owner from the route and reads it there, through one :class:`EndpointBackend`
  per broker (a lone broker is a cluster of one). It is what ``endpoint`` mode uses.

Backends are cached per process (:func:`backend_for`): Spark reuses its Python workers, so
executor tasks keep their open StoreReaders / HTTP connection pools across batches.

This module holds :class:`PathBackend` and the factory; the seam, the errors and the cache
are in :mod:`streaming.backend_contract` (below every backend), :class:`EndpointBackend` in
:mod:`streaming.endpoint_backend`. Import them all from here.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

# The reader infers file sizes from the files; the short owner open must use the same sizes.
# (Private helpers of store.read.store_reader: a public "config of an existing directory" would be better.)
from store import (
    Boundary,
    MessageStore,
    StoreConfig,
    StoreReader,
    UnknownTopic,
    existing_config,
)
from streaming.backend_contract import (
    BACKENDS,
    BACKENDS_LOCK,
    Backend,
    BackendError,
    BrokerUnreachable,
    QueueElsewhere,
    QueueHeads,
    ReadChunk,
    is_backend_fault,
)
from streaming.cluster_backend import ClusterBackend
from streaming.endpoint_backend import (
    ARROW_STREAM,
    MAX_PULL_MESSAGES,
    READ_FROM_HEADER,
    ArrowPuller,
    EndpointBackend,
)

#: The source's backends and their seam, importable from here (defined in the modules above).
__all__ = [
    "ARROW_STREAM",
    "MAX_PULL_MESSAGES",
    "READ_FROM_HEADER",
    "ArrowPuller",
    "Backend",
    "BackendError",
    "BrokerUnreachable",
    "ClusterBackend",
    "EndpointBackend",
    "PathBackend",
    "QueueElsewhere",
    "QueueHeads",
    "ReadChunk",
    "backend_for",
    "is_backend_fault",
    "owner_config",
]


# -- path mode ---------------------------------------------------------------------------------


class PathBackend:
    """A store directory read without its lock.

    The :class:`store.read.store_reader.StoreReader` is opened lazily (the object must stay cheap to
    build on every Spark worker). Group offsets are written by briefly opening the store as
    its owner (:meth:`commit_group_offsets`), which only works while no other process holds
    it; with a running broker give the source ``endpoint`` as well and offsets go over HTTP.
    """

    def __init__(self, store_dir: str) -> None:
        self.store_dir = store_dir
        self._reader: StoreReader | None = None
        self._lock = threading.Lock()

    def _store_reader(self) -> StoreReader:
        with self._lock:
            if self._reader is None:
                self._reader = StoreReader(self.store_dir)
            return self._reader

    def refresh(self) -> None:
        # Retention may have deleted files since this worker last looked: see them go.
        self._store_reader().refresh()

    def topics(self) -> list[str]:
        return sorted(self._store_reader().topics())

    def queue_heads(self, topic: str) -> QueueHeads:
        try:
            return dict(self._store_reader().queue_offsets(topic))
        except UnknownTopic:
            return {}

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._store_reader().offset_for_timestamp(topic, queue_id, timestamp_ms, Boundary.LOWER)

    def read_range(
        self, topic: str, queue_id: int, *, offset: int, end_offset: int, max_messages: int, tags: str
    ) -> ReadChunk:
        res = self._store_reader().read_batch(
            topic, queue_id, offset, max_messages, tag_expression=tags, end_offset=end_offset
        )
        return ReadChunk(res.status, res.next_offset, res.min_offset, res.max_offset, res.batch)

    def release_pages(self) -> None:
        # Spark keeps its Python workers (and this backend) between batches: without this each
        # one kept every CommitLog page it had read mapped (StoreReader.release_pages).
        if self._reader is not None:
            self._reader.release_pages()

    def commit_group_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Open the directory as its owner for one commit (raises ``StoreLocked`` if owned)."""
        with MessageStore.open(owner_config(self.store_dir)) as owner:
            owner.commit_offsets(group, topic, dict(offsets))

    def owner_of(self, topic: str, queue_id: int) -> str:
        return ""


def owner_config(store_dir: str) -> StoreConfig:
    """A config that opens an existing directory as it was written (its recorded layout, see
    :mod:`store.metadata.file_sizes`); no background services for a short open."""
    return existing_config(store_dir, background_services=False)


# -- the factory ---------------------------------------------------------------------------


def backend_for(
    mode: str,
    location: str,
    timeout_s: float = 30.0,
    auth_token: str | None = None,
    *,
    wait_for_brokers: bool = False,
    read_from: str = "master",
    tls_ca: str | None = None,
) -> Backend:
    """The process-wide backend for a store directory (``mode="path"``), a cluster reached
    through any of its brokers (``"endpoint"``: :class:`streaming.cluster_backend.ClusterBackend`)
    or one broker only (``"broker"``: :class:`EndpointBackend`). ``wait_for_brokers``: a cluster
    backend waits for a broker that is down instead of failing (``failOnDataLoss=false``)."""
    key = (mode, location, timeout_s, auth_token, wait_for_brokers and mode == "endpoint", read_from, tls_ca)
    with BACKENDS_LOCK:
        backend = BACKENDS.get(key)
        if backend is None:
            if mode == "path":
                backend = PathBackend(location)
            elif mode == "broker":
                backend = EndpointBackend(location, timeout_s, auth_token, read_from=read_from, tls_ca=tls_ca)
            elif mode == "endpoint":
                backend = ClusterBackend(
                    location,
                    timeout_s,
                    auth_token,
                    wait_for_brokers=wait_for_brokers,
                    read_from=read_from,
                    tls_ca=tls_ca,
                )
            else:
                raise ValueError(f"unknown backend mode {mode!r}")
            BACKENDS[key] = backend
        return backend
