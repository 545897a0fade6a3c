"""TxnOffsetCommit: the consumer offsets of a transaction (``send_offsets_to_transaction``).

Sent to the *group* coordinator. The offsets become an offsets half of the producer's
transaction, applied to the group only when it commits. The transaction lives at its own
coordinator, so in a cluster the group coordinator hands the offsets to the transaction
coordinator (``txn-offsets``), which writes an offsets half at each queue's owner — where the
group's offsets live (:func:`ingest_api.kafka.txn_cluster.write_offsets`).
"""

from __future__ import annotations

import logging
from typing import Any

from cluster import QueueUnavailable
from ingest_api.kafka import codec, txn_cluster
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.base import Connection, not_coordinator
from ingest_api.kafka.handlers.topics import known_partition_error
from ingest_api.kafka.peer_messages import ErrorAnswer, TxnOffsetsMsg
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.versions import ApiKey

log = logging.getLogger(__name__)

OffsetRow = tuple[str, int, int]


async def handle_txn_offset_commit(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    tid, group = str(body.transactional_id), str(body.group_id)
    commits = [(t.name, p.partition_index, p.committed_offset) for t in body.topics for p in t.partitions]
    if not_coordinator(ctx, group, CoordinatorKind.GROUP):
        return _answer(request, commits, [ErrorCode.NOT_COORDINATOR] * len(commits))
    error = _membership(ctx, group, getattr(body, "generation_id", -1), getattr(body, "member_id", ""))
    if error == ErrorCode.NONE:
        errors = await ctx.run_blocking(lambda: [known_partition_error(ctx, t, p) for t, p, _ in commits])
        if any(e != ErrorCode.NONE for e in errors):
            return _answer(request, commits, errors)
        error = await transactional_offsets(ctx, tid, group, body.producer_id, body.producer_epoch, commits)
    error = ErrorCode.INVALID_PRODUCER_EPOCH if error == ErrorCode.PRODUCER_FENCED else error
    return _answer(request, commits, [error] * len(commits))


def _membership(ctx: GatewayContext, group: str, generation: int, member_id: str) -> ErrorCode:
    """Kafka checks member and generation only when the consumer names them (v3+)."""
    if generation < 0 and not member_id:
        return ErrorCode.NONE
    verdict = ctx.coordinator.validate_commit(group, generation, member_id)
    return ErrorCode.NONE if verdict == ErrorCode.REBALANCE_IN_PROGRESS else verdict


async def transactional_offsets(
    ctx: GatewayContext, tid: str, group: str, producer_id: int, epoch: int, commits: list[OffsetRow]
) -> ErrorCode:
    """At the group coordinator: the offsets join ``tid``'s transaction at its coordinator."""
    link = ctx.cluster
    if link is None or link.coordinates(tid, CoordinatorKind.TRANSACTION):
        return await coordinator_offsets(ctx, tid, group, producer_id, epoch, commits)
    choice = link.coordinator(tid, CoordinatorKind.TRANSACTION)
    if choice.broker_name is None or choice.node is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    message = TxnOffsetsMsg(tid, producer_id, epoch, group, commits)
    try:
        answer: ErrorAnswer = await link.peer(choice.broker_name, "txn-offsets", message)
    except QueueUnavailable as exc:
        log.info("TxnOffsetCommit of %r for group %r: %s", tid, group, exc)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode(answer.error)


async def coordinator_offsets(
    ctx: GatewayContext, tid: str, group: str, producer_id: int, epoch: int, commits: list[OffsetRow]
) -> ErrorCode:
    """At the transaction coordinator: join the open transaction, write the offsets halves."""
    if ctx.txn_loading:  # a promotion replays the coordinator's state: the client asks again
        return ErrorCode.NOT_COORDINATOR
    async with ctx.txn_lock(tid):
        error, sparkmq_id = ctx.txn.join(tid, producer_id, epoch, group=group)
        if error != ErrorCode.NONE:
            return error
        entry = ctx.txn.get(tid)
        assert entry is not None
        if ctx.cluster is not None:
            return await txn_cluster.write_offsets(ctx, entry, group, commits)
        half = txn_cluster.half_of(tid, sparkmq_id, entry.timeout_ms)
        return await txn_cluster.put_offsets_half(ctx, half, producer_id, group, commits)


def _answer(request: KafkaRequest, commits: list[OffsetRow], errors: list[ErrorCode]) -> bytes:
    cls = codec.response_class(ApiKey.TXN_OFFSET_COMMIT)
    topic_cls = cls.TxnOffsetCommitResponseTopic
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition, _), error in zip(commits, errors, strict=True):
        by_topic.setdefault(topic, []).append(
            topic_cls.TxnOffsetCommitResponsePartition(partition_index=partition, error_code=error)
        )
    topics = [topic_cls(name=name, partitions=parts) for name, parts in by_topic.items()]
    return codec.encode_response(request, throttle_time_ms=0, topics=topics)
