"""CreateTopics and DeleteTopics (sent to the controller, which is this broker).

In a cluster every broker is a controller: topics are created, spread over the live brokers,
and deleted through ZooKeeper (``ClusterNode``), with the cluster's default queue count.

* Partitions = the store's queue count; ``num_partitions=-1`` uses the store default.
* Replication factor must be -1 or 1 (single broker), else INVALID_REPLICATION_FACTOR.
* Names are percent-encoded for the store where needed (:mod:`ingest_api.kafka.names`); a
  name the store still refuses (too long) gets INVALID_TOPIC_EXCEPTION. System topics can be
  neither created nor deleted.
* Topic configs are accepted and ignored.
"""

from __future__ import annotations

import logging
from typing import Any

from cluster import ClusterError
from ingest_api.kafka import codec
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.base import Connection
from ingest_api.kafka.handlers.topics import partition_count
from ingest_api.kafka.names import to_store
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.versions import ApiKey
from store import InvalidArgument, StoreError, is_system_topic

log = logging.getLogger(__name__)

DEFAULT = -1
#: CreateTopics v5+ echoes partitions / replication factor / configs.
CREATE_DETAIL_VERSION = 5
MAX_PARTITIONS = 1024


def _create_one(
    store: KafkaStore, name: str, partitions: int, replication: int, validate_only: bool
) -> tuple[ErrorCode, str | None, int]:
    if replication not in (DEFAULT, 1):
        return ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be 1 (single broker)", -1
    if partitions == DEFAULT:
        partitions = int(getattr(store.config, "default_queues_per_topic", 8))
    if not 1 <= partitions <= MAX_PARTITIONS:
        return ErrorCode.INVALID_PARTITIONS, f"partitions must be in [1, {MAX_PARTITIONS}]", -1
    if is_system_topic(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name!r} is a reserved system topic", -1
    if store.has_topic(name):
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", -1
    if validate_only:
        return ErrorCode.NONE, None, partitions
    try:
        return ErrorCode.NONE, None, store.create_topic(name, partitions)
    except InvalidArgument as exc:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc), -1
    except StoreError as exc:
        log.exception("create topic %r failed", name)
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), -1


def _create_routed(
    link: ClusterLink, name: str, partitions: int, replication: int, validate_only: bool
) -> tuple[ErrorCode, str | None, int]:
    """:func:`_create_one` through the cluster (blocking: a ZooKeeper write)."""
    if replication not in (DEFAULT, 1):
        return ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be 1 (no replicas yet)", -1
    if partitions == DEFAULT:
        partitions = link.node.config.default_queues
    if not 1 <= partitions <= MAX_PARTITIONS:
        return ErrorCode.INVALID_PARTITIONS, f"partitions must be in [1, {MAX_PARTITIONS}]", -1
    if is_system_topic(name):
        return ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name!r} is a reserved system topic", -1
    if link.placement(name) is not None:
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", -1
    if validate_only:
        return ErrorCode.NONE, None, partitions
    try:
        created = link.node.create_topic(to_store(name), partitions)
    except InvalidArgument as exc:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc), -1
    except ClusterError as exc:
        log.warning("create topic %r through the cluster failed: %s", name, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, str(exc), -1
    if created is None:  # another broker created it since this one's view was read
        return ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", -1
    return ErrorCode.NONE, None, created.queue_count


async def handle_create_topics(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    wanted = [(t.name, t.num_partitions, t.replication_factor) for t in body.topics]
    validate_only = bool(getattr(body, "validate_only", False))

    def create_all() -> list[tuple[ErrorCode, str | None, int]]:
        if ctx.cluster is not None:
            link = ctx.cluster
            return [_create_routed(link, name, parts, repl, validate_only) for name, parts, repl in wanted]
        return [_create_one(ctx.store, name, parts, repl, validate_only) for name, parts, repl in wanted]

    outcomes = await ctx.run_blocking(create_all)
    cls = codec.response_class(ApiKey.CREATE_TOPICS)
    results: list[Any] = []
    for (name, _, _), (error, message, partitions) in zip(wanted, outcomes, strict=True):
        fields: dict[str, Any] = {"name": name, "error_code": error, "error_message": message}
        if request.api_version >= CREATE_DETAIL_VERSION:
            fields.update(
                topic_id=ctx.topic_id(name) if error == ErrorCode.NONE else None,
                num_partitions=partitions,
                replication_factor=1 if error == ErrorCode.NONE else -1,
                configs=[] if error == ErrorCode.NONE else None,
            )
        results.append(cls.CreatableTopicResult(**fields))
    return codec.encode_response(request, throttle_time_ms=0, topics=results)


def _delete_one(ctx: GatewayContext, name: str) -> ErrorCode:
    if ctx.cluster is not None:
        return _delete_routed(ctx.cluster, name)
    if partition_count(ctx.store, name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        ctx.store.delete_topic(name)
    except StoreError:
        log.exception("delete topic %r failed", name)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.NONE


def _delete_routed(link: ClusterLink, name: str) -> ErrorCode:
    """Remove the topic's route; every owner then deletes its queues (blocking)."""
    if is_system_topic(name) or link.placement(name) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        deleted = link.node.delete_topic(to_store(name))
    except ClusterError as exc:
        log.warning("delete topic %r through the cluster failed: %s", name, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR
    return ErrorCode.NONE if deleted else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def handle_delete_topics(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    names = list(request.body.topic_names)

    def delete_all() -> list[ErrorCode]:
        return [_delete_one(ctx, name) for name in names]

    errors = await ctx.run_blocking(delete_all)
    for name, error in zip(names, errors, strict=True):
        if error == ErrorCode.NONE:
            ctx.producers.forget_topic(name)
    cls = codec.response_class(ApiKey.DELETE_TOPICS)
    responses = [
        cls.DeletableTopicResult(name=name, error_code=error, error_message=None)
        for name, error in zip(names, errors, strict=True)
    ]
    return codec.encode_response(request, throttle_time_ms=0, responses=responses)
