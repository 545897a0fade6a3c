"""Client registration: HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP."""

from __future__ import annotations

from ingest_api.remoting.bodies import decode_heartbeat, encode_consumer_list
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from ingest_api.remoting.connection import Connection
from ingest_api.remoting.handlers.context import DoorContext
from ingest_api.remoting.headers import GetConsumerListByGroupRequest, UnregisterClientRequest


async def heart_beat(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """Register the client's groups; the connection remembers its client id."""
    hb = decode_heartbeat(cmd.body)
    ctx.clients.heartbeat(hb, ctx.clock_ms())
    conn.client_id = hb.client_id
    ctx.connections[hb.client_id] = conn
    return response_to(cmd, ResponseCode.SUCCESS)


async def unregister_client(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    header = UnregisterClientRequest.from_ext_fields(cmd.ext_fields)
    ctx.clients.unregister(header.client_id, header.producer_group, header.consumer_group)
    if not ctx.clients.knows(header.client_id):
        ctx.connections.pop(header.client_id, None)
    return response_to(cmd, ResponseCode.SUCCESS)


async def get_consumer_list(ctx: DoorContext, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    """The live members of a group; SYSTEM_ERROR when it has none (RocketMQ's answer)."""
    header = GetConsumerListByGroupRequest.from_ext_fields(cmd.ext_fields)
    members = ctx.clients.consumer_ids(header.consumer_group, ctx.clock_ms())
    if not members:
        return response_to(
            cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {header.consumer_group}"
        )
    return response_to(cmd, ResponseCode.SUCCESS, body=encode_consumer_list(members))
