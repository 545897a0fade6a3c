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
* ``PUT  /sinks/{sink_id}/batches/{batch_id}/chunks/{seq}?fresh=&flush=`` — cluster only, broker
  to broker (header ``x-sparkmq-forwarded``): the coordinator of a batch decided across brokers
  sends chunk ``seq`` (an Arrow IPC stream of ``PART_SCHEMA`` rows of one topic, every
  ``queue_id`` set) to the broker owning those queues, which stores it exactly once through its
  own key index (:class:`store.publish.ChunkWriter`); answer ``{"seq", "rows", "stored_before"}``.

In a cluster the broker receiving the commit is the batch's *coordinator*: its decision records
the target topics' routes, and each chunk goes to the owner of its queues
(:class:`broker.sink_peers.PeerSinkRouter`; docs/exactly_once.md, "Across brokers").

Batches decided but not yet published when the broker stopped are published again at start
by :func:`resume_sink_publishing` (call it from the app's lifespan) or, at the latest, by the
sink's next commit; in a cluster those decided across brokers are resumed in the background
once the broker has joined.
"""

from __future__ import annotations

import logging
from typing import Annotated

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from broker.auth import Right, authorize
from broker.errors import BrokerError
from broker.reads import local_ready
from broker.routing import FORWARDED_HEADER
from broker.sinks import part_topics, sink_router, staging_for
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep, InternalOnly, JsonBody, PrincipalDep
from ingest_api.http.fields import Count
from ingest_api.http.openapi import INTERNAL
from ingest_api.http.schemas import ErrorOut
from ingest_api.params import ID_PATH_PATTERN
from store import InvalidArgument
from store.publish import (
    PART_SCHEMA,
    ChunkRef,
    SinkStagingError,
    StagedPart,
)

log = logging.getLogger(__name__)

router = APIRouter(
    prefix="/sinks", tags=["sinks"], responses={400: {"model": ErrorOut}, 409: {"model": ErrorOut}}
)

_ID = ID_PATH_PATTERN
SinkPath = Annotated[str, Path(pattern=_ID, description="Sink id (the Spark query id by default).")]
BatchPath = Annotated[int, Path(ge=0, description="Micro-batch id.")]
PartPath = Annotated[str, Path(pattern=_ID, description="Staged part id (unique per task attempt).")]
ChunkPath = Annotated[int, Path(ge=0, description="Chunk number within the batch.")]


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


class ChunkOut(BaseModel):
    seq: int
    rows: int
    #: Rows of the chunk found already stored (a resumed or repeated request).
    stored_before: int


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
        for topic in await run_blocking(part_topics, payload):
            authorize(principal, Right.PRODUCE, topic)
    staged = await run_blocking(staging_for(broker).stage_part, sink_id, batch_id, part_id, payload)
    return PartOut(part_id=staged.part_id, rows=staged.rows)


@router.post(
    "/{sink_id}/batches/{batch_id}:commit",
    response_model=CommitOut,
    dependencies=[JsonBody],
    openapi_extra=INTERNAL,
)
async def commit_batch(
    sink_id: SinkPath,
    batch_id: BatchPath,
    spec: CommitIn,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
) -> CommitOut:
    """Decide the batch (first decision wins) and publish it; answers once it is readable."""
    del principal  # parts were authorised at upload; a commit only names them
    parts = [StagedPart(p.part_id, p.rows) for p in spec.parts]
    auth = request.headers.get("authorization")
    router = sink_router(broker, {"authorization": auth} if auth else {})
    try:
        outcome = await run_blocking(staging_for(broker).commit, sink_id, batch_id, parts, router)
    except SinkStagingError as exc:
        raise BrokerError(409, "sink_staging_error", str(exc)) from exc
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
    removed = await run_blocking(staging_for(broker).abort, sink_id, batch_id, spec.part_ids)
    return {"removed": removed}


@router.get("/{sink_id}", response_model=SinkOut, openapi_extra=INTERNAL)
async def describe_sink(sink_id: SinkPath, broker: BrokerDep, principal: PrincipalDep) -> SinkOut:
    """The last published batch and the batches decided but not yet published."""
    del principal
    staging = staging_for(broker)
    last = await run_blocking(staging.last_published, sink_id)
    pending = await run_blocking(staging.pending, sink_id)
    return SinkOut(sink_id=sink_id, last_published_batch=last, pending=pending)


def _chunk_rows(payload: bytes) -> pa.Table:
    """A chunk's rows: an Arrow IPC stream in ``PART_SCHEMA``, one topic, every queue id set."""
    try:
        rows = pa.ipc.open_stream(pa.BufferReader(payload)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgument(f"a sink chunk must be an Arrow IPC stream: {exc}") from exc
    if not rows.schema.equals(PART_SCHEMA):
        raise InvalidArgument(f"a sink chunk must have the sink part schema, got {rows.schema}")
    if rows.column("queue_id").null_count:
        raise InvalidArgument("every row of a sink chunk has its queue_id resolved")
    return rows


#: A chunk's body, as a coordinator sends it (broker/sink_peers.py).
_CHUNK_BODY = {
    **INTERNAL,
    "requestBody": {
        "required": True,
        "content": {
            "application/vnd.apache.arrow.stream": {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Arrow IPC stream, the sink's part schema: one topic, queue_id set.",
                }
            }
        },
    },
}


@router.put(
    "/{sink_id}/batches/{batch_id}/chunks/{seq}",
    response_model=ChunkOut,
    openapi_extra=_CHUNK_BODY,
    dependencies=[InternalOnly],  # broker to broker; the rows are judged on the user it carries
)
async def store_chunk(
    sink_id: SinkPath,
    batch_id: BatchPath,
    seq: ChunkPath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    fresh: Annotated[bool, Query(description="Sent by the call that decided the batch.")] = False,
    flush: Annotated[bool, Query(description="Flush the store before answering.")] = False,
) -> ChunkOut:
    """Store chunk ``seq`` of a batch decided across brokers, exactly once (owner side)."""
    node = broker.cluster
    if node is None:
        raise BrokerError(400, "not_a_cluster", "sink chunks are sent between brokers of a cluster")
    if FORWARDED_HEADER not in request.headers:
        problem = f"sink chunks come from the broker that decided the batch ({FORWARDED_HEADER})"
        raise BrokerError(400, "not_forwarded", problem)
    rows = await run_blocking(_chunk_rows, await request.body())
    topics = [t for t in pc.unique(rows.column("topic")).to_pylist() if t is not None]
    if len(topics) != 1:
        raise InvalidArgument(f"a sink chunk holds the rows of one topic, got {sorted(topics)}")
    topic = str(topics[0])
    authorize(principal, Right.PRODUCE, topic)
    placement = node.view.placement(topic)
    if placement is None:
        raise BrokerError(503, "route_unknown", f"topic {topic!r} has no route on {node.name} yet; retry")
    queue_ids = np.unique(np.asarray(rows.column("queue_id").to_numpy(zero_copy_only=False)))
    if queue_ids.size and (int(queue_ids[0]) < 0 or int(queue_ids[-1]) >= placement.queue_count):
        raise InvalidArgument(f"queue ids {queue_ids.tolist()} are outside topic {topic!r}'s queues")
    foreign = [int(q) for q in queue_ids if placement.owners[int(q)] != node.name]
    if foreign:
        raise BrokerError(
            421,
            "misdirected",
            f"queue {foreign[0]} of {topic!r} is owned by {placement.owners[foreign[0]]}, not {node.name}",
        )
    await local_ready(broker, {topic: placement})
    writer = staging_for(broker).writer
    ref = ChunkRef(sink_id, batch_id, seq)
    outcome = await run_blocking(writer.store_chunk, ref, rows, fresh=fresh, flush=flush)
    return ChunkOut(seq=seq, rows=outcome.rows, stored_before=outcome.stored_before)
