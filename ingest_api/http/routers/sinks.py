"""``/sinks``: the broker side of the exactly-once Spark sink in ``endpoint`` mode.

Spark write tasks upload staged parts, the Spark driver commits a batch by naming its parts;
the broker decides once and publishes idempotently (:mod:`store.publish.sink_staging`, design in
docs/exactly_once.md). Every route is idempotent, so clients retry freely across a restart.

* ``PUT  /sinks/{sink_id}/batches/{batch_id}/parts/{part_id}`` — body: an Arrow IPC *file* in the
  part schema; answer ``{"part_id", "rows"}``. Invisible to readers.
* ``POST /sinks/{sink_id}/batches/{batch_id}:commit`` — ``{"parts": [{"part_id", "rows"}]}``;
  answer ``{"sink_id", "batch_id", "rows", "decided_now", "already_published"}`` once the
  batch is published (for a replay: the earlier decision's rows).
* ``POST /sinks/{sink_id}/batches/{batch_id}:abort`` — ``{"part_ids": [...]}``: drop a failed
  attempt's parts (never decided ones).
* ``GET  /sinks/{sink_id}`` — ``{"last_published_batch", "pending"}``.

Batches decided but not yet published when the broker stopped are published again at start
by :func:`resume_sink_publishing` (call it from the app's lifespan) or, at the latest, by the
sink's next commit.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from ingest_api.http.auth import Right, authorize
from ingest_api.http.broker import Broker
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.errors import ApiError
from ingest_api.http.fields import Count
from ingest_api.http.openapi import INTERNAL
from ingest_api.http.params import ID_PATH_PATTERN
from ingest_api.http.schemas import ErrorOut
from store import InvalidArgument, MessageStore
from store.publish import CommitOutcome, SinkStaging, SinkStagingError, StagedPart

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/sinks", tags=["sinks"], responses={400: {"model": ErrorOut}, 409: {"model": ErrorOut}}
)

_ID = ID_PATH_PATTERN
SinkPath = Annotated[str, Path(pattern=_ID, description="Sink id (the Spark query id by default).")]
BatchPath = Annotated[int, Path(ge=0, description="Micro-batch id.")]
PartPath = Annotated[str, Path(pattern=_ID, description="Staged part id (unique per task attempt).")]


class PartIn(BaseModel):
    part_id: str = Field(pattern=_ID)
    rows: Count


class CommitIn(BaseModel):
    parts: list[PartIn]


class AbortIn(BaseModel):
    part_ids: list[str]


class PartOut(BaseModel):
    part_id: str
    rows: int


class CommitOut(BaseModel):
    sink_id: str
    batch_id: int
    rows: int
    decided_now: bool
    already_published: bool


class SinkOut(BaseModel):
    sink_id: str
    last_published_batch: int
    pending: list[int]


ARROW_FILE = "application/vnd.apache.arrow.file"

_staging_lock = threading.Lock()


def staging_for(broker: Broker) -> SinkStaging:
    """The broker's one :class:`SinkStaging` (built on first use, kept on the broker object)."""
    with _staging_lock:
        staging = getattr(broker, "_sink_staging", None)
        if not isinstance(staging, SinkStaging) or staging.store is not broker.store:
            staging = SinkStaging(broker.store)
            broker._sink_staging = staging  # type: ignore[attr-defined]
        return staging


def resume_sink_publishing(store: MessageStore) -> list[CommitOutcome]:
    """Publish every batch decided before the last stop (blocking; run in a thread at start)."""
    outcomes = SinkStaging(store).recover()
    for outcome in outcomes:
        log.info("sink %s: published batch %d (%d rows) left decided by the last run",
                 outcome.sink_id, outcome.batch_id, outcome.rows)  # fmt: skip
    return outcomes


@asynccontextmanager
async def sink_recovery(broker: Broker) -> AsyncIterator[None]:
    """A companion (``create_app(..., companions=[sink_recovery])``) that runs the resume at start."""
    await run_in_threadpool(resume_sink_publishing, broker.store)
    yield


def _part_topics(payload: bytes) -> list[str]:
    try:
        table = pa.ipc.open_file(pa.BufferReader(payload)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgument(f"a staged part must be an Arrow IPC file: {exc}") from exc
    if "topic" not in table.schema.names:
        raise InvalidArgument("a staged part needs a 'topic' column")
    return [t for t in pc.unique(table.column("topic")).to_pylist() if t is not None]


#: The staged part's body, as the sink sends it (streaming/sink_client.py).
_PART_BODY = {
    **INTERNAL,
    "requestBody": {
        "required": True,
        "content": {
            ARROW_FILE: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Arrow IPC file in the sink's part schema (a 'topic' column per row).",
                }
            }
        },
    },
}


@router.put(
    "/{sink_id}/batches/{batch_id}/parts/{part_id}",
    response_model=PartOut,
    status_code=201,
    openapi_extra=_PART_BODY,
)
async def stage_part(
    sink_id: SinkPath, batch_id: BatchPath, part_id: PartPath, request: Request, broker: BrokerDep,
    principal: PrincipalDep,
) -> PartOut:  # fmt: skip
    """Stage one part (idempotent: the same part id overwrites itself)."""
    payload = await request.body()
    if principal is not None:
        for topic in await run_in_threadpool(_part_topics, payload):
            authorize(principal, Right.PRODUCE, topic)
    staged = await run_in_threadpool(staging_for(broker).stage_part, sink_id, batch_id, part_id, payload)
    return PartOut(part_id=staged.part_id, rows=staged.rows)


@router.post(
    "/{sink_id}/batches/{batch_id}:commit",
    response_model=CommitOut,
    dependencies=[JsonBody],
    openapi_extra=INTERNAL,
)
async def commit_batch(
    sink_id: SinkPath, batch_id: BatchPath, spec: CommitIn, broker: BrokerDep, principal: PrincipalDep
) -> CommitOut:
    """Decide the batch (first decision wins) and publish it; answers once it is readable."""
    del principal  # parts were authorised at upload; a commit only names them
    parts = [StagedPart(p.part_id, p.rows) for p in spec.parts]
    try:
        outcome = await run_in_threadpool(staging_for(broker).commit, sink_id, batch_id, parts)
    except SinkStagingError as exc:
        raise ApiError(409, "sink_staging_error", str(exc)) from exc
    broker.metrics.sink_committed(outcome.rows, outcome.decided_now, outcome.already_published)
    return CommitOut(
        sink_id=sink_id,
        batch_id=batch_id,
        rows=outcome.rows,
        decided_now=outcome.decided_now,
        already_published=outcome.already_published,
    )


@router.post("/{sink_id}/batches/{batch_id}:abort", dependencies=[JsonBody], openapi_extra=INTERNAL)
async def abort_batch(
    sink_id: SinkPath, batch_id: BatchPath, spec: AbortIn, broker: BrokerDep, principal: PrincipalDep
) -> dict[str, int]:
    """Delete a failed attempt's parts (decided parts are kept)."""
    del principal
    removed = await run_in_threadpool(staging_for(broker).abort, sink_id, batch_id, spec.part_ids)
    return {"removed": removed}


@router.get("/{sink_id}", response_model=SinkOut, openapi_extra=INTERNAL)
async def describe_sink(sink_id: SinkPath, broker: BrokerDep, principal: PrincipalDep) -> SinkOut:
    """The last published batch and the batches decided but not yet published."""
    del principal
    staging = staging_for(broker)
    last = await run_in_threadpool(staging.last_published, sink_id)
    pending = await run_in_threadpool(staging.pending, sink_id)
    return SinkOut(sink_id=sink_id, last_published_batch=last, pending=pending)
