"""The exactly-once sink's broker side, below the doors: staging, recovery at start.

The HTTP door's ``/sinks`` routes (:mod:`ingest_api.http.routers.sinks`) decode requests and call
these; :func:`sink_recovery` is part of the broker's lifecycle (:mod:`broker.lifecycle`):
batches decided but not yet published when the broker stopped are published again before it
serves, and in a cluster those decided across brokers are resumed in the background once the
broker has joined (docs/exactly_once.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path as FilePath

import pyarrow as pa
import pyarrow.compute as pc

from broker.sink_peers import PeerSinkRouter
from broker.state import Broker
from broker.threads import run_blocking
from store import InvalidArgument, MessageStore
from store.publish import CommitOutcome, SinkRouter, SinkStaging

log = logging.getLogger("ingest_api.http.routers.sinks")


_staging_lock = threading.Lock()


def staging_for(broker: Broker) -> SinkStaging:
    """The broker's one :class:`SinkStaging` (built on first use, kept on the broker object)."""
    with _staging_lock:
        staging = getattr(broker, "_sink_staging", None)
        if not isinstance(staging, SinkStaging) or staging.store is not broker.store:
            staging = SinkStaging(broker.store, on_event=fault_hook(broker.config.sink_fault))
            broker._sink_staging = staging  # type: ignore[attr-defined]
        return staging


def fault_hook(spec: str | None) -> Callable[[str], None] | None:
    """Test only (``SPARKMQ_TEST_SINK_FAULT``): ``<event>:<kill|pause>:<marker>``, once per marker.

    ``kill`` SIGKILLs this broker at the event; ``pause`` blocks the publishing thread there
    until ``<marker>.release`` exists (at most 300 s). A trailing ``*`` in the event matches a
    prefix (``stored-*``: the first chunk this broker stores as an owner)."""
    if not spec:
        return None
    point, action, marker = spec.split(":", 2)

    def hit(event: str) -> None:
        matches = event.startswith(point[:-1]) if point.endswith("*") else event == point
        if not matches or os.path.exists(marker):
            return
        FilePath(marker).write_text(f"{os.getpid()} {event}\n")
        log.warning("test fault: %s at sink event %s", action, event)
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        deadline = time.monotonic() + 300
        while not os.path.exists(f"{marker}.release") and time.monotonic() < deadline:
            time.sleep(0.05)

    return hit


def resume_sink_publishing(store: MessageStore) -> list[CommitOutcome]:
    """Publish every batch decided before the last stop (blocking; run in a thread at start).
    Batches decided across brokers are left for :func:`sink_recovery`'s cluster pass."""
    outcomes = SinkStaging(store).recover()
    for outcome in outcomes:
        log.info("sink %s: published batch %d (%d rows) left decided by the last run",
                 outcome.sink_id, outcome.batch_id, outcome.rows)  # fmt: skip
    return outcomes


def sink_router(broker: Broker, headers: dict[str, str]) -> SinkRouter | None:
    """A cluster router for one commit (``None`` on a lone broker)."""
    if broker.cluster is None:
        return None
    return PeerSinkRouter(broker, asyncio.get_running_loop(), headers)


def _log_recovery(task: asyncio.Task[list[CommitOutcome]]) -> None:
    if task.cancelled():
        return
    failure = task.exception()
    if failure is not None:
        log.error("sink recovery across brokers failed (the next commit resumes): %r", failure)
        return
    for outcome in task.result():
        log.info("sink %s: published batch %d (%d rows) decided across brokers before the last stop",
                 outcome.sink_id, outcome.batch_id, outcome.rows)  # fmt: skip


@asynccontextmanager
async def sink_recovery(broker: Broker) -> AsyncIterator[None]:
    """A companion (``create_app(..., companions=[sink_recovery])``) that runs the resume at start:
    local decisions before serving; in a cluster, decisions across brokers in the background
    (their owners may still be starting; a failure is logged and left for the next commit)."""
    await run_blocking(resume_sink_publishing, broker.store)
    task: asyncio.Task[list[CommitOutcome]] | None = None
    router = sink_router(broker, {})
    if router is not None:
        task = asyncio.create_task(run_blocking(staging_for(broker).recover, router))
        task.add_done_callback(_log_recovery)
    try:
        yield
    finally:
        if task is not None and not task.done():
            task.cancel()


def part_topics(payload: bytes) -> list[str]:
    try:
        table = pa.ipc.open_file(pa.BufferReader(payload)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgument(f"a staged part must be an Arrow IPC file: {exc}") from exc
    if "topic" not in table.schema.names:
        raise InvalidArgument("a staged part needs a 'topic' column")
    return [t for t in pc.unique(table.column("topic")).to_pylist() if t is not None]
