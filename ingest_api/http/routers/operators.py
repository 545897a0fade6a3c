"""``/operators``: the stateful operators' side of the broker.

* ``GET  /operators`` — the operator job (child process or external) and each resolver query:
  state, last batch id and time, input lag, pending delayed messages, next due time,
  relocations published.
* ``GET  /operators/settings`` — what the job needs to compute due times (level table, timer
  precision, roll window, burst cap); the job reads it at start.
* ``POST /operators/{operator}/batches/{batch_id}`` — body: an Arrow IPC stream of the batch's
  resolver output; the relocation requests are decided once per (operator, batch) and
  published exactly once (:mod:`store.publish.relocations`). Idempotent: a replayed batch
  answers ``already_published``.
* ``PUT  /operators/{operator}/status`` — the job's progress report.
"""

from __future__ import annotations

from typing import Annotated, Any

import pyarrow as pa
from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel

from broker.auth import authorize_global_admin
from broker.errors import BrokerError
from broker.operators import OperatorBoard
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http.batches import ARROW_STREAM
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.openapi import INTERNAL
from ingest_api.http.schemas import ErrorOut
from ingest_api.params import ID_PATH_PATTERN
from store import TRANSACTION_OPERATOR, InvalidArgument

router = APIRouter(prefix="/operators", tags=["operators"], responses={400: {"model": ErrorOut}})

OperatorPath = Annotated[str, Path(pattern=ID_PATH_PATTERN, description="Operator name, e.g. delay.")]
BatchPath = Annotated[int, Path(ge=0, description="Micro-batch id of the operator's query.")]


class RelocationOut(BaseModel):
    operator: str
    batch_id: int
    requests: int
    appended: int
    decided_now: bool
    already_published: bool


def board_of(broker: Broker) -> OperatorBoard:
    board = broker.operators
    if board is None:
        raise BrokerError(503, "operators_unavailable", "the broker has no operator board")
    return board


@router.get("")
async def list_operators(broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """The operator job and each resolver query with its progress and pending messages."""
    authorize_global_admin(principal)
    board = board_of(broker)
    return {"job": board.job(), "operators": await run_blocking(board.describe)}


@router.get("/settings", openapi_extra=INTERNAL)
async def operator_settings(broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """The due-time settings the resolver job must use (this broker's configuration)."""
    authorize_global_admin(principal)
    return board_of(broker).settings


def _read_table(payload: bytes) -> pa.Table:
    try:
        return pa.ipc.open_stream(pa.BufferReader(payload)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgument(f"the batch must be an Arrow IPC stream: {exc}") from exc


#: The resolver output of one micro-batch, as the operator job sends it (streaming/operators/runtime.py).
_BATCH_BODY = {
    **INTERNAL,
    "requestBody": {
        "required": True,
        "content": {ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}}},
    },
}


@router.post("/{operator}/batches/{batch_id}", response_model=RelocationOut, openapi_extra=_BATCH_BODY)
async def commit_batch(
    operator: OperatorPath, batch_id: BatchPath, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> RelocationOut:
    """Decide (first decision wins) and publish one batch of relocation requests."""
    authorize_global_admin(principal)
    board = board_of(broker)
    table = await run_blocking(_read_table, await request.body())
    if operator == TRANSACTION_OPERATOR:  # check-backs and discards, applied once per batch
        if board.transactions is None:
            raise BrokerError(503, "transactions_unavailable", "this broker has no transaction service")
        applied = await board.transactions.apply_batch(batch_id, table)
        board.state(operator).last_published_batch = max(board.state(operator).last_published_batch, batch_id)
        return RelocationOut(
            operator=operator,
            batch_id=batch_id,
            requests=applied.requests,
            appended=applied.discarded,
            decided_now=not applied.already_applied,
            already_published=applied.already_applied,
        )
    outcome = await run_blocking(board.commit_batch, operator, batch_id, table)
    return RelocationOut(
        operator=operator,
        batch_id=batch_id,
        requests=outcome.requests,
        appended=outcome.appended,
        decided_now=outcome.decided_now,
        already_published=outcome.already_published,
    )


@router.put("/{operator}/status", status_code=204, response_class=Response, openapi_extra=INTERNAL)
async def report_status(
    operator: OperatorPath, status: dict[str, Any], broker: BrokerDep, principal: PrincipalDep
) -> None:
    """The operator job's progress report for one query."""
    authorize_global_admin(principal)
    board_of(broker).report(operator, status)
