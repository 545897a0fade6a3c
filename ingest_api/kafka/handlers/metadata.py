"""ApiVersions, Metadata and FindCoordinator: the bootstrap conversation.

A lone gateway is every partition's leader, the controller (admin clients send CreateTopics
there and loop forever on ``controller_id = -1``) and every group's coordinator. Its host/port
are the *advertised* ones. In a cluster (``ctx.cluster``) Metadata comes from the routes
(:mod:`ingest_api.kafka.handlers.cluster_metadata`) and coordinators from a stable hash
(:mod:`ingest_api.kafka.topology`); this broker stays the controller.
"""

from __future__ import annotations

from typing import Any

from ingest_api.kafka import codec
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers import cluster_metadata
from ingest_api.kafka.handlers.base import Connection
from ingest_api.kafka.handlers.topics import ensure_topic, visible_topics
from ingest_api.kafka.sasl import SASL_VERSIONS
from ingest_api.kafka.topology import CoordinatorKind, KafkaNode
from ingest_api.kafka.versions import SUPPORTED_VERSIONS, ApiKey

#: FindCoordinator key types: consumer groups and transactional ids.
GROUP_KEY_TYPE = CoordinatorKind.GROUP.value
TRANSACTION_KEY_TYPE = CoordinatorKind.TRANSACTION.value
FIND_COORDINATOR_BATCHED_VERSION = 4


async def handle_api_versions(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    cls = codec.response_class(ApiKey.API_VERSIONS)
    versions: dict[int, tuple[int, int]] = {int(key): span for key, span in SUPPORTED_VERSIONS.items()}
    if ctx.auth is not None:  # a SASL listener: clients refuse to log in unless these are listed
        versions.update(SASL_VERSIONS)
    api_keys = [
        cls.ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(versions.items())
    ]
    return codec.encode_response(request, error_code=ErrorCode.NONE, api_keys=api_keys, throttle_time_ms=0)


async def handle_metadata(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    requested = None if body.topics is None else [t.name for t in body.topics]
    if request.api_version == 0 and requested == []:
        requested = None  # v0: an empty list means all topics
    # Before v4 the flag is not on the wire and decodes as its schema default (true); the
    # authorization guard turns it off for a caller without CREATE, whatever the version.
    auto_create = bool(body.allow_auto_topic_creation)

    def lookup() -> list[tuple[str, ErrorCode, int]]:
        if requested is None:
            return [
                (name, ErrorCode.NONE, count) for name, count in sorted(visible_topics(ctx.store).items())
            ]
        return [(name, *ensure_topic(ctx.store, name, auto_create)) for name in requested if name is not None]

    if ctx.cluster is not None:
        return await _cluster_metadata(ctx, ctx.cluster, request, requested, auto_create)
    topics = await ctx.run_blocking(lookup)
    cls = codec.response_class(ApiKey.METADATA)
    node = ctx.config.node_id
    broker = cls.MetadataResponseBroker(
        node_id=node, host=ctx.advertised_host, port=ctx.advertised_port, rack=None
    )
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        brokers=[broker],
        cluster_id=ctx.config.cluster_id,
        controller_id=node,
        topics=[_topic_entry(ctx, cls, name, error, count) for name, error, count in topics],
    )


async def _cluster_metadata(
    ctx: GatewayContext,
    link: ClusterLink,
    request: KafkaRequest,
    requested: list[str] | None,
    auto_create: bool,
) -> bytes:
    found = await ctx.run_blocking(cluster_metadata.lookup_topics, link, requested, auto_create)
    cls = codec.response_class(ApiKey.METADATA)
    nodes = cluster_metadata.brokers(ctx, link)
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        brokers=[
            cls.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=None) for n in nodes
        ],
        cluster_id=ctx.config.cluster_id,
        controller_id=ctx.config.node_id,
        topics=[
            cls.MetadataResponseTopic(
                error_code=error,
                name=name,
                topic_id=ctx.topic_id(name) if placement is not None else None,
                is_internal=False,
                partitions=[] if placement is None else cluster_metadata.partitions(cls, link, placement),
            )
            for name, error, placement in found
        ],
    )


def _topic_entry(ctx: GatewayContext, cls: Any, name: str, error: ErrorCode, count: int) -> Any:
    node = ctx.config.node_id
    partition_cls = cls.MetadataResponseTopic.MetadataResponsePartition
    partitions = [
        partition_cls(
            error_code=ErrorCode.NONE,
            partition_index=index,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=[node],
            isr_nodes=[node],
            offline_replicas=[],
        )
        for index in range(count)
    ]
    return cls.MetadataResponseTopic(
        error_code=error,
        name=name,
        topic_id=ctx.topic_id(name) if error == ErrorCode.NONE else None,
        is_internal=False,
        partitions=partitions,
    )


async def handle_find_coordinator(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    key_type = getattr(body, "key_type", GROUP_KEY_TYPE)  # v0 has none: a group
    if request.api_version >= FIND_COORDINATOR_BATCHED_VERSION:
        cls = codec.response_class(ApiKey.FIND_COORDINATOR)
        coordinators = []
        for key in body.coordinator_keys:
            error, node = _coordinator(ctx, key_type, key)
            coordinators.append(
                cls.Coordinator(
                    key=key,
                    node_id=node.node_id if node else -1,
                    host=node.host if node else "",
                    port=node.port if node else -1,
                    error_code=error,
                    error_message=None,
                )
            )
        return codec.encode_response(request, throttle_time_ms=0, coordinators=coordinators)
    error, node = _coordinator(ctx, key_type, body.key)
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        error_code=error,
        error_message=None,
        node_id=node.node_id if node else -1,
        host=node.host if node else "",
        port=node.port if node else -1,
    )


def _coordinator(ctx: GatewayContext, key_type: int, key: str) -> tuple[ErrorCode, KafkaNode | None]:
    """The coordinator of one key: this broker when alone, else the stable hash's choice."""
    if key_type not in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE):
        return ErrorCode.INVALID_REQUEST, None
    if ctx.cluster is None:
        return ErrorCode.NONE, KafkaNode(ctx.config.node_id, ctx.advertised_host, ctx.advertised_port, "")
    choice = ctx.cluster.coordinator(key, CoordinatorKind(key_type))
    if choice.node is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
    return ErrorCode.NONE, choice.node
