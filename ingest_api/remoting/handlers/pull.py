"""PULL_MESSAGE (11): the ConsumeQueue read with tag filtering, long polling, and the raw
CommitLog records as the body (what RocketMQ sends; clients decode them themselves).

The tag expression is the request's ``subscription`` when its sysFlag says so, else the
group's from its last heartbeat, else ``*``. A commit offset in the request (sysFlag bit 0)
is committed first (:func:`broker.group_offsets.commit_offset`: a POP group is refused). With
nothing new and the suspend flag set, the pull parks up to ``suspendTimeoutMillis`` on the
broker's arrival hub (:class:`broker.longpoll.ArrivalHub`, the one HTTP's long polls wait on)
and reads again once. Status mapping
(RocketMQ ``PullMessageProcessor``): FOUND -> SUCCESS, all filtered out ->
PULL_RETRY_IMMEDIATELY, nothing new -> PULL_NOT_FOUND, below the min or beyond the max ->
PULL_OFFSET_MOVED, an empty or unknown queue -> PULL_NOT_FOUND at offset 0 and
PULL_OFFSET_MOVED elsewhere.

In a cluster the client's queue number is this broker's ``i``-th queue of the topic; a master
serves its own queues, a slave serves them below its confirm offset (the store's bound on a
replica) and answers ``suggestWhichBrokerId`` 0 so the client goes back to the master once it
is there; a queue read elsewhere is refused like a send (TOPIC_NOT_EXIST). Not yet: flow limits
by ``maxMsgBytes``.
"""

from __future__ import annotations

import dataclasses

from broker.errors import BrokerError
from broker.offsets import commit_offset
from broker.reads import read_placement
from broker.threads import run_blocking
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import (
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    ResponseCode,
)
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.handlers.store_errors import answer_store_error
from ingest_api.remoting.headers import PullMessageRequest, PullMessageResponse
from store import GetResult, GetStatus, SparkMQError

#: Longest park of one pull, whatever the client asks (RocketMQ clients ask 15-20 s).
MAX_SUSPEND_MS = 30_000


def _tag_expression(ctx: DoorContext, header: PullMessageRequest) -> str:
    if header.sys_flag & PULL_FLAG_SUBSCRIPTION and header.subscription:
        return header.subscription
    data = ctx.clients.subscription(header.consumer_group, ctx.clock_ms())
    for sub in data.subscriptions if data is not None else ():
        if sub.topic == header.topic:
            return sub.sub_string
    return "*"


def _status_code(result: GetResult, requested_offset: int) -> ResponseCode:
    status = result.status
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS
    if status is GetStatus.NO_MATCHED_MESSAGE:
        return ResponseCode.PULL_RETRY_IMMEDIATELY
    if status is GetStatus.NO_NEW_MESSAGE:
        return ResponseCode.PULL_NOT_FOUND
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return ResponseCode.PULL_NOT_FOUND if requested_offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    return ResponseCode.PULL_OFFSET_MOVED  # OFFSET_TOO_SMALL, OFFSET_OVERFLOW_BADLY


async def _read(ctx: DoorContext, header: PullMessageRequest, expression: str) -> tuple[GetResult, bytes]:
    """The read and the raw records of what it found."""

    def read() -> tuple[GetResult, bytes]:
        store = ctx.store
        result = store.get_messages(
            header.topic, header.queue_id, header.queue_offset, header.max_msg_nums, expression
        )
        records = [store.read_bytes(m.commitlog_offset, m.size_bytes) for m in result.messages]
        return result, b"".join(r for r in records if r is not None)

    return await ctx.run_blocking(read)


async def _served_here(ctx: DoorContext, topic: str, queue_id: int) -> None:
    """Raise unless this broker serves reads of the queue (:func:`broker.reads.read_placement`:
    a slave serves below its confirm offset, a master its own queues)."""
    node = ctx.broker.cluster
    if node is None:
        return
    master = node.view.master_of(node.name)
    at_slave = master is None or node.member is None or master.member_id != node.member.member_id
    elsewhere = await read_placement(ctx.broker, topic, queue_id, at_slave)
    if elsewhere is not None:
        raise BrokerError(
            421, "not_owner", f"queue {queue_id} of {topic!r} is read at broker {elsewhere.broker_name}"
        )


async def pull_message(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = PullMessageRequest.from_ext_fields(cmd.ext_fields)
    header = dataclasses.replace(header, queue_id=ctx.queue_id(header.topic, header.queue_id))
    try:
        await _served_here(ctx, header.topic, header.queue_id)
    except (BrokerError, SparkMQError) as exc:
        return answer_store_error(cmd, exc)
    if header.max_msg_nums <= 0:
        return response_to(
            cmd, ResponseCode.INVALID_PARAMETER, f"maxMsgNums must be positive: {header.max_msg_nums}"
        )
    if header.sys_flag & PULL_FLAG_COMMIT_OFFSET and header.commit_offset >= 0:
        await commit_offset(
            ctx.broker, header.consumer_group, header.topic, header.queue_id, header.commit_offset
        )
    expression = _tag_expression(ctx, header)
    result, body = await _read(ctx, header, expression)
    suspend_ms = min(header.suspend_timeout_millis, MAX_SUSPEND_MS)
    if result.status is GetStatus.NO_NEW_MESSAGE and header.sys_flag & PULL_FLAG_SUSPEND and suspend_ms > 0:
        store = ctx.store

        async def current_max() -> int:
            return await run_blocking(store.max_offset, header.topic, header.queue_id)

        hub = ctx.broker.hub
        if await hub.wait(header.topic, header.queue_id, header.queue_offset, suspend_ms / 1000, current_max):
            result, body = await _read(ctx, header, expression)
    response = PullMessageResponse(
        suggest_which_broker_id=0,
        next_begin_offset=result.next_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )
    code = _status_code(result, header.queue_offset)
    return response_to(
        cmd, code, ext_fields=response.to_ext_fields(), body=body if code == ResponseCode.SUCCESS else b""
    )
