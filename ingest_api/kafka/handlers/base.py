"""Types shared by every handler module."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.topology import CoordinatorKind


@dataclass(frozen=True, slots=True)
class Connection:
    """Who is on the other end of a socket (for DescribeGroups' client_host and logs)."""

    connection_id: int
    peer_host: str
    peer_port: int


#: Returns the framed response, or ``None`` when the client expects none (Produce acks=0).
Handler = Callable[[GatewayContext, Connection, KafkaRequest], Awaitable[bytes | None]]


def not_coordinator(ctx: GatewayContext, key: str, kind: CoordinatorKind) -> bool:
    """True in a cluster when another broker coordinates ``key`` (answer NOT_COORDINATOR: the
    client looks the coordinator up again); for a transactional id also while a promoted member
    replays the coordinator's state (``ctx.txn_loading``)."""
    if kind is CoordinatorKind.TRANSACTION and ctx.txn_loading:
        return True
    return ctx.cluster is not None and not ctx.cluster.coordinates(key, kind)
