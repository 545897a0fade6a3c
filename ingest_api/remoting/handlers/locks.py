"""Orderly consumption's queue locks over the wire: LOCK_BATCH_MQ (41) answers the queues the
caller holds afterwards (``lockOKMQSet``); UNLOCK_BATCH_MQ (42) releases the caller's own locks
only. The table is :class:`~ingest_api.remoting.handlers.queue_locks.QueueLocks`.
"""

from __future__ import annotations

from ingest_api.remoting.bodies import decode_lock_request, encode_lock_response
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext


async def lock_batch(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = decode_lock_request(cmd.body)
    granted = ctx.locks.lock(req.consumer_group, req.client_id, req.mq_set, ctx.clock_ms())
    return response_to(cmd, ResponseCode.SUCCESS, body=encode_lock_response(granted))


async def unlock_batch(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = decode_lock_request(cmd.body)
    ctx.locks.unlock(req.consumer_group, req.client_id, req.mq_set)
    return response_to(cmd, ResponseCode.SUCCESS)
