"""Internal routes of a replica group: the side tables a slave copies, a member's status.

Both are left out of the OpenAPI document; :mod:`broker.replication` holds what they answer.
With ``--auth-file`` the metadata (consumer offsets of every group) is for brokers only: users,
superusers included, get 403. The status is for brokers and global admins (the operators job
asks it whether its member leads).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from broker.auth import authorize_global_admin, caller
from broker.replication import metadata_snapshot, replica_status
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep, InternalOnly

router = APIRouter(include_in_schema=False)


@router.get("/replica/metadata", dependencies=[InternalOnly])
async def replica_metadata(broker: BrokerDep) -> dict[str, Any]:
    """The side tables a slave copies (its master's consumer and delay offsets)."""
    return await run_blocking(metadata_snapshot, broker.store)


@router.get("/replica/status")
async def replica_status_route(request: Request, broker: BrokerDep) -> dict[str, Any]:
    """This member's replication status (asked by ``GET /cluster`` on any broker)."""
    principal = caller(broker.auth, request.headers)
    if principal is not None and not principal.is_broker:
        authorize_global_admin(principal)
    return await run_blocking(lambda: replica_status(broker) or {})
