"""Admin and lookup codes: UPDATE_AND_CREATE_TOPIC (17), VIEW_MESSAGE_BY_ID (33),
QUERY_MESSAGE (12, by key) and GET_EARLIEST_MSG_STORETIME (32).

Messages are answered as RocketMQ does, as raw CommitLog records in the body (the client
decodes them, as for pulls). A topic is created with ``max(readQueueNums, writeQueueNums)``
queues (sparkmq has one queue count per topic; a topic only ever grows), in a cluster in the
cluster's routes (:func:`broker.writes.create_or_grow_topic`).
"""

from __future__ import annotations

import dataclasses

from broker.writes import create_or_grow_topic
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import (
    CreateTopicRequest,
    GetEarliestMsgStoretimeRequest,
    QueryMessageRequest,
    QueryMessageResponse,
    TimestampResponse,
    ViewMessageRequest,
)
from store import MessageView, SparkMQError


async def create_topic(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = CreateTopicRequest.from_ext_fields(cmd.ext_fields)
    queues = max(header.read_queue_nums, header.write_queue_nums)
    if queues <= 0:
        return response_to(cmd, ResponseCode.INVALID_PARAMETER, f"queue numbers must be positive: {queues}")
    try:
        await create_or_grow_topic(ctx.broker, header.topic, queues)
    except SparkMQError as exc:
        return answer_store_error(cmd, exc)
    return response_to(cmd, ResponseCode.SUCCESS)


async def view_message(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """The record at a CommitLog offset (the client decodes it from an offset msg id)."""
    header = ViewMessageRequest.from_ext_fields(cmd.ext_fields)
    record = await ctx.run_blocking(ctx.store.read_record, header.offset)
    if record is None:
        return response_to(
            cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {header.offset}"
        )
    return response_to(cmd, ResponseCode.SUCCESS, body=record)


async def query_message(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Messages of a topic with a key, stored within [beginTimestamp, endTimestamp]."""
    header = QueryMessageRequest.from_ext_fields(cmd.ext_fields)
    store = ctx.store

    def lookup() -> tuple[list[MessageView], bytes]:
        views = store.query_by_key(
            header.topic, header.key, header.begin_timestamp, header.end_timestamp, max(1, header.max_num)
        )
        records = [store.read_bytes(v.commitlog_offset, v.size_bytes) for v in views]
        return views, b"".join(r for r in records if r is not None)

    views, body = await ctx.run_blocking(lookup)
    response = QueryMessageResponse(
        index_last_update_timestamp=max((v.store_timestamp_ms for v in views), default=0),
        index_last_update_phyoffset=store.commitlog_max_offset,
    )
    if not views:
        remark = "can not find message, maybe time range not correct"
        return response_to(cmd, ResponseCode.QUERY_NOT_FOUND, remark, ext_fields=response.to_ext_fields())
    return response_to(cmd, ResponseCode.SUCCESS, ext_fields=response.to_ext_fields(), body=body)


async def earliest_store_time(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Store timestamp of the queue's first message; -1 for an empty queue."""
    header = GetEarliestMsgStoretimeRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    store = ctx.store

    def earliest() -> int:
        first = store.min_offset(header.topic, header.queue_id)
        found = store.get_messages(header.topic, header.queue_id, first, 1)
        return found.messages[0].store_timestamp_ms if found.messages else -1

    timestamp = await ctx.run_blocking(earliest)
    return response_to(cmd, ResponseCode.SUCCESS, ext_fields=TimestampResponse(timestamp).to_ext_fields())
