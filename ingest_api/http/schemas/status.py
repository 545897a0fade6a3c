"""Bodies of the broker's status: stats, health, errors, the cluster and routes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ClusterHealthOut(BaseModel):
    broker: str
    session: str = Field(description="ZooKeeper session: connected, suspended or lost.")
    registered: bool = Field(description="Whether this broker's member node is registered.")
    warnings: list[str]


class HealthOut(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded: serving, but cut off from ZooKeeper or with cluster warnings (see cluster)."
    )
    cluster: ClusterHealthOut | None = Field(None, description="Cluster mode only.")


def _optional_error_fields(schema: dict[str, Any]) -> None:
    schema["properties"].update(
        {
            "index": {"type": "integer", "description": "The refused entry of a batch (0-based)."},
            "field": {"type": "string", "description": "The refused field (invalid_schedule, ...)."},
            "detail": {
                "type": "array",
                "description": "validation_error: every field that fails, with its location.",
                "items": {"type": "object", "additionalProperties": True},
            },
            "retriable": {"type": "boolean", "description": "Store faults: whether a retry may succeed."},
            "services": {
                "type": "array",
                "items": {"type": "string"},
                "description": "store_degraded: the failing store services.",
            },
            "limit": {"type": "integer", "description": "batch_too_large: the most messages per batch."},
        }
    )


class ErrorOut(BaseModel):
    """Every error answer: a stable code and a message, plus fields some errors add."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_optional_error_fields)

    error: str = Field(description="Stable machine-readable code.")
    message: str


class ReplicaMemberOut(BaseModel):
    member_id: int
    http: str
    role: str = Field(description="master, slave, standby, fenced, or unknown (did not answer).")
    epoch: int | None
    replicated_offset: int | None = Field(description="Its CommitLog's max offset.")
    confirm_offset: int | None = Field(description="What its readers see up to.")
    lag_bytes: int | None = Field(description="Behind the master, in bytes (the master's view).")


class BrokerOut(BaseModel):
    name: str = Field(description="Broker name (``--broker-name``); ``local`` for a lone broker.")
    alive: bool = Field(description="Whether its ZooKeeper session is alive (it serves its queues).")
    http: str | None = Field(description="Its HTTP base URL (the last known one when dead).")
    kafka: str | None = Field(description="Its Kafka address host:port, when it serves Kafka.")
    member_id: int | None = Field(description="Member id (also its Kafka node id); a group's master.")
    queues: int = Field(description="Queue ids it owns, over every topic.")
    epoch: int | None = Field(None, description="Replica group: the master epoch.")
    in_sync: list[int] | None = Field(None, description="Replica group: the in-sync set's member ids.")
    members: list[ReplicaMemberOut] | None = Field(None, description="Replica group: every live member.")


class ClusterOut(BaseModel):
    mode: Literal["single", "cluster"]
    cluster: str | None = Field(None, description="The ZooKeeper address (``--cluster``).")
    self_name: str = Field(alias="self", description="The name of the broker that answered.")
    self_member: int | None = Field(None, description="Its member id (cluster mode).")
    session: str | None = Field(description="Its ZooKeeper session: connected, suspended or lost.")
    brokers: list[BrokerOut]
    topics: int = Field(description="Topics in the cluster.")
    warnings: list[str] = Field(
        description="Problems that need an operator (e.g. data on an unrouted queue)."
    )


class QueueRouteOut(BaseModel):
    queue_id: int
    broker: str
    alive: bool
    http: str | None
    kafka: str | None
    replicas: list[str] | None = Field(
        None, description="Cluster mode: the live members of the broker's replica group, the master first."
    )


class TopicRouteOut(BaseModel):
    topic: str
    queues: list[QueueRouteOut]
