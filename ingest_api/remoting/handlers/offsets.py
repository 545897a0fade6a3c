"""Group offsets and queue bounds: QUERY/UPDATE_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET,
SEARCH_OFFSET_BY_TIMESTAMP, over the group offset table HTTP, Kafka and Spark share
(:mod:`broker.group_offsets`: a POP group's offsets are refused).

A group with no committed offset gets QUERY_NOT_FOUND (the client then applies its
``consumeFromWhere``), except on an empty queue, which answers 0 unless the client sent
``setZeroIfNotFound=false`` (RocketMQ's ``minOffset <= 0 && !checkInMemByConsumeOffset`` rule:
offset 0 when nothing of the queue is there yet).
"""

from __future__ import annotations

import dataclasses

from broker.offsets import commit_offset, committed_offset
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import (
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    OffsetResponse,
    QueryConsumerOffsetRequest,
    SearchOffsetRequest,
    UpdateConsumerOffsetRequest,
)
from store import Boundary, SparkMQError


def _offset(cmd: RemotingCommand, offset: int) -> RemotingCommand:
    return response_to(cmd, ResponseCode.SUCCESS, ext_fields=OffsetResponse(offset).to_ext_fields())


async def query_consumer_offset(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = QueryConsumerOffsetRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    store = ctx.store
    try:
        committed = committed_offset(ctx.broker, header.consumer_group, header.topic, header.queue_id)
    except SparkMQError as exc:
        return answer_store_error(cmd, exc)
    if committed >= 0:
        return _offset(cmd, committed)
    empty = store.has_topic(header.topic) and store.max_offset(header.topic, header.queue_id) == 0
    if empty and header.set_zero_if_not_found is not False:
        return _offset(cmd, 0)
    return response_to(cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first")


async def update_consumer_offset(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Commit (ali-ons sends it one-way: the answer is then dropped by the server)."""
    header = UpdateConsumerOffsetRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    try:
        await commit_offset(
            ctx.broker, header.consumer_group, header.topic, header.queue_id, header.commit_offset
        )
    except SparkMQError as exc:
        return answer_store_error(cmd, exc)
    return response_to(cmd, ResponseCode.SUCCESS)


async def get_max_offset(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = GetMaxOffsetRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    return _offset(cmd, ctx.store.max_offset(header.topic, header.queue_id))


async def get_min_offset(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = GetMinOffsetRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    return _offset(cmd, ctx.store.min_offset(header.topic, header.queue_id))


async def search_offset(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = SearchOffsetRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    boundary = Boundary.UPPER if (header.boundary_type or "").lower() == "upper" else Boundary.LOWER
    offset = await ctx.run_blocking(
        ctx.store.offset_for_timestamp, header.topic, header.queue_id, header.timestamp, boundary
    )
    return _offset(cmd, offset)
