"""ListOffsets, OffsetCommit and OffsetFetch.

Committed offsets live in the store's offsetTable (``topic@group``, "next offset to
consume"), shared with the HTTP and Spark doors, so ``store.lag`` and ``GET
/groups/{group}/lag`` see Kafka commits; in a cluster, in the offsetTable of each queue's owner
(:mod:`ingest_api.kafka.handlers.group_offsets`). ``committed_metadata`` strings are kept in
the coordinator's memory. ListOffsets of a partition another broker owns answers
NOT_LEADER_OR_FOLLOWER.

ListOffsets by timestamp: the store indexes *store* time, Kafka asks about record
(CreateTime = born) time. ``offset_for_timestamp(T)`` gives the first message stored at or
after T; as a message is born before it is stored, the answer cannot be earlier, so the
gateway scans forward (at most :data:`MAX_TIMESTAMP_SCAN` messages) for the first record born
at or after T. No such record -> offset -1 / timestamp -1 (the client's ``None``).
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from ingest_api.kafka import codec
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers import group_offsets
from ingest_api.kafka.handlers.base import Connection, not_coordinator
from ingest_api.kafka.handlers.group_offsets import Committed
from ingest_api.kafka.handlers.topics import partition_count, served_partition_error
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.versions import ApiKey
from store import Boundary, UnknownQueue, UnknownTopic

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
MAX_TIMESTAMP_SCAN = 20_000
SCAN_CHUNK = 1_000
#: OffsetFetch answers batched per group from this version on.
OFFSET_FETCH_GROUPS_VERSION = 8


# --- ListOffsets ---------------------------------------------------------------------------------
def _born_ms(store: KafkaStore, topic: str, partition: int, offset: int, count: int) -> list[int]:
    read = store.read_batch(topic, partition, offset, count)
    return [us // 1000 for us in read.batch.column("born_timestamp").cast(pa.int64()).to_pylist()]


def lookup_offset(
    store: KafkaStore, topic: str, partition: int, timestamp: int
) -> tuple[ErrorCode, int, int]:
    """Blocking: ``(error, offset, timestamp)`` for one ListOffsets partition of the store."""
    count = partition_count(store, topic)
    if count is None or not 0 <= partition < count:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
    low, high = store.min_offset(topic, partition), store.max_offset(topic, partition)
    if timestamp == LATEST:
        return ErrorCode.NONE, high, -1
    if timestamp == EARLIEST:
        return ErrorCode.NONE, low, -1
    if timestamp == MAX_TIMESTAMP:
        if high <= low:
            return ErrorCode.NONE, -1, -1
        return ErrorCode.NONE, high - 1, _born_ms(store, topic, partition, high - 1, 1)[0]
    if timestamp < 0:
        return ErrorCode.INVALID_REQUEST, -1, -1
    offset = max(store.offset_for_timestamp(topic, partition, timestamp, Boundary.LOWER), low)
    scanned = 0
    while offset < high and scanned < MAX_TIMESTAMP_SCAN:
        chunk = _born_ms(store, topic, partition, offset, min(SCAN_CHUNK, high - offset))
        if not chunk:
            break
        for index, born in enumerate(chunk):
            if born >= timestamp:
                return ErrorCode.NONE, offset + index, born
        offset += len(chunk)
        scanned += len(chunk)
    return ErrorCode.NONE, -1, -1


async def handle_list_offsets(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    wanted = [(t.name, p.partition_index, p.timestamp) for t in request.body.topics for p in t.partitions]

    def lookup_one(topic: str, partition: int, timestamp: int) -> tuple[ErrorCode, int, int]:
        served = served_partition_error(ctx, topic, partition)
        if served != ErrorCode.NONE:
            return served, -1, -1
        try:
            return lookup_offset(ctx.store, topic, partition, timestamp)
        except (UnknownTopic, UnknownQueue):  # deleted while we looked
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1

    def lookup_all() -> list[tuple[ErrorCode, int, int]]:
        return [lookup_one(topic, partition, ts) for topic, partition, ts in wanted]

    found = await ctx.run_blocking(lookup_all)
    cls = codec.response_class(ApiKey.LIST_OFFSETS)
    partition_cls = cls.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _), (error, offset, timestamp) in zip(wanted, found, strict=True):
        by_topic.setdefault(topic, []).append(
            partition_cls(
                partition_index=partition,
                error_code=error,
                timestamp=timestamp,
                offset=offset,
                leader_epoch=0,
            )
        )
    topics = [cls.ListOffsetsTopicResponse(name=name, partitions=parts) for name, parts in by_topic.items()]
    return codec.encode_response(request, throttle_time_ms=0, topics=topics)


# --- OffsetCommit --------------------------------------------------------------------------------
async def handle_offset_commit(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    group = body.group_id
    generation = body.generation_id_or_member_epoch
    commits = [
        (t.name, p.partition_index, p.committed_offset, p.committed_metadata)
        for t in body.topics
        for p in t.partitions
    ]
    errors: list[ErrorCode]
    if not_coordinator(ctx, group, CoordinatorKind.GROUP):
        errors = [ErrorCode.NOT_COORDINATOR] * len(commits)
    elif (verdict := ctx.coordinator.validate_commit(group, generation, body.member_id)) != ErrorCode.NONE:
        errors = [verdict] * len(commits)
    else:
        errors = await group_offsets.commit(ctx, group, commits)
        for (topic, partition, _, metadata), error in zip(commits, errors, strict=True):
            if error == ErrorCode.NONE and metadata:
                ctx.commit_metadata[(group, topic, partition)] = metadata
    cls = codec.response_class(ApiKey.OFFSET_COMMIT)
    partition_cls = cls.OffsetCommitResponseTopic.OffsetCommitResponsePartition
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _, _), error in zip(commits, errors, strict=True):
        by_topic.setdefault(topic, []).append(partition_cls(partition_index=partition, error_code=error))
    topics = [cls.OffsetCommitResponseTopic(name=name, partitions=parts) for name, parts in by_topic.items()]
    return codec.encode_response(request, throttle_time_ms=0, topics=topics)


# --- OffsetFetch ---------------------------------------------------------------------------------
async def _committed(
    ctx: GatewayContext, group: str, query: group_offsets.TopicQuery
) -> tuple[ErrorCode, Committed]:
    if not_coordinator(ctx, group, CoordinatorKind.GROUP):
        return ErrorCode.NOT_COORDINATOR, []
    return await group_offsets.fetch(ctx, group, query)


async def handle_offset_fetch(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    cls = codec.response_class(ApiKey.OFFSET_FETCH)
    if request.api_version >= OFFSET_FETCH_GROUPS_VERSION:
        answers = []
        for group in body.groups:
            query = (
                None if group.topics is None else [(t.name, list(t.partition_indexes)) for t in group.topics]
            )
            error, committed = await _committed(ctx, group.group_id, query)
            answers.append(_group_answer(ctx, cls, group.group_id, error, committed))
        return codec.encode_response(request, throttle_time_ms=0, groups=answers)
    query = None if body.topics is None else [(t.name, list(t.partition_indexes)) for t in body.topics]
    error, committed = await _committed(ctx, body.group_id, query)
    topic_cls = cls.OffsetFetchResponseTopic
    topics = [
        topic_cls(
            name=name,
            partitions=[
                topic_cls.OffsetFetchResponsePartition(
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata=ctx.commit_metadata.get((body.group_id, name, p), ""),
                    error_code=ErrorCode.NONE,
                )
                for p, offset in partitions
            ],
        )
        for name, partitions in committed
    ]
    return codec.encode_response(request, throttle_time_ms=0, topics=topics, error_code=error)


def _group_answer(ctx: GatewayContext, cls: Any, group: str, error: ErrorCode, committed: Committed) -> Any:
    group_cls = cls.OffsetFetchResponseGroup
    topic_cls = group_cls.OffsetFetchResponseTopics
    partition_cls = topic_cls.OffsetFetchResponsePartitions
    topics = [
        topic_cls(
            name=name,
            partitions=[
                partition_cls(
                    partition_index=p,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    metadata=ctx.commit_metadata.get((group, name, p), ""),
                    error_code=ErrorCode.NONE,
                )
                for p, offset in partitions
            ],
        )
        for name, partitions in committed
    ]
    return group_cls(group_id=group, topics=topics, error_code=error)
