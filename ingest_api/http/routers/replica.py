"""Internal routes of a replica group: the side tables a slave copies, a member's status.

Both are left out of the OpenAPI document; :mod:`broker.replication` holds what they answer.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from broker.replication import metadata_snapshot, replica_status
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep

router = APIRouter(include_in_schema=False)


@router.get("/replica/metadata")
async def replica_metadata(broker: BrokerDep) -> dict[str, Any]:
    """The side tables a slave copies (its master's consumer and delay offsets)."""
    return await run_blocking(metadata_snapshot, broker.store)


@router.get("/replica/status")
async def replica_status_route(broker: BrokerDep) -> dict[str, Any]:
    """This member's replication status (asked by ``GET /cluster`` on any broker)."""
    return await run_blocking(lambda: replica_status(broker) or {})
