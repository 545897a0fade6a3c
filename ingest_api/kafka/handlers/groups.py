"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups.

Thin adapters over :class:`ingest_api.kafka.coordinator.GroupCoordinator`: a parked
JoinGroup/SyncGroup awaits a future the coordinator resolves from its callback. Clients send
group traffic on a dedicated coordinator connection, so a parked join never delays a fetch.
In a cluster only the group's coordinator (:mod:`ingest_api.kafka.topology`) serves them;
other brokers answer NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from ingest_api.kafka import codec
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.coordinator import GroupState, JoinRequest, JoinResult, SyncResult
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.base import Connection, not_coordinator
from ingest_api.kafka.handlers.group_offsets import offset_groups
from ingest_api.kafka.topology import CoordinatorKind
from ingest_api.kafka.versions import ApiKey

R = TypeVar("R")
#: JoinGroup v1 added rebalance_timeout_ms (v0 uses the session timeout for both).
REBALANCE_TIMEOUT_VERSION = 1
#: JoinGroup v7 / SyncGroup v5 made protocol_name nullable.
JOIN_NULLABLE_PROTOCOL_VERSION = 7
SYNC_NULLABLE_PROTOCOL_VERSION = 5
LEAVE_MEMBERS_VERSION = 3


def _resolver(loop: asyncio.AbstractEventLoop) -> tuple[asyncio.Future[Any], Any]:
    future: asyncio.Future[Any] = loop.create_future()

    def resolve(result: object) -> None:
        if not future.done():  # the connection may have gone away while parked
            future.set_result(result)

    return future, resolve


GROUP = CoordinatorKind.GROUP


async def handle_join_group(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    if not_coordinator(ctx, body.group_id, GROUP):
        return codec.encode_response(
            request,
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_COORDINATOR,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if request.api_version >= JOIN_NULLABLE_PROTOCOL_VERSION else "",
            leader="",
            member_id=body.member_id or "",
            members=[],
        )
    rebalance_timeout = (
        body.rebalance_timeout_ms
        if request.api_version >= REBALANCE_TIMEOUT_VERSION
        else body.session_timeout_ms
    )
    join = JoinRequest(
        group_id=body.group_id,
        member_id=body.member_id or "",
        client_id=request.client_id or "",
        client_host=f"/{conn.peer_host}",
        session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in body.protocols),
    )
    future, resolve = _resolver(ctx.loop)
    ctx.coordinator.join_group(join, resolve)
    result: JoinResult = await future
    nullable = request.api_version >= JOIN_NULLABLE_PROTOCOL_VERSION
    cls = codec.response_class(ApiKey.JOIN_GROUP)
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if result.protocol_name is not None or nullable else "",
        leader=result.leader_id,
        member_id=result.member_id,
        members=[
            cls.JoinGroupResponseMember(member_id=mid, group_instance_id=None, metadata=meta)
            for mid, meta in result.members
        ],
    )


async def handle_sync_group(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    if not_coordinator(ctx, body.group_id, GROUP):
        return codec.encode_response(
            request,
            throttle_time_ms=0,
            error_code=ErrorCode.NOT_COORDINATOR,
            protocol_type=None,
            protocol_name=None if request.api_version >= SYNC_NULLABLE_PROTOCOL_VERSION else "",
            assignment=b"",
        )
    assignments = {a.member_id: bytes(a.assignment) for a in body.assignments or ()}
    future, resolve = _resolver(ctx.loop)
    ctx.coordinator.sync_group(body.group_id, body.generation_id, body.member_id, assignments, resolve)
    result: SyncResult = await future
    nullable = request.api_version >= SYNC_NULLABLE_PROTOCOL_VERSION
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if result.protocol_name is not None or nullable else "",
        assignment=result.assignment,
    )


async def handle_heartbeat(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    if not_coordinator(ctx, body.group_id, GROUP):
        return codec.encode_response(request, throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR)
    error = ctx.coordinator.heartbeat(body.group_id, body.generation_id, body.member_id)
    return codec.encode_response(request, throttle_time_ms=0, error_code=error)


async def handle_leave_group(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    if not_coordinator(ctx, body.group_id, GROUP):
        refused: dict[str, Any] = {} if request.api_version < LEAVE_MEMBERS_VERSION else {"members": []}
        return codec.encode_response(
            request, throttle_time_ms=0, error_code=ErrorCode.NOT_COORDINATOR, **refused
        )
    if request.api_version < LEAVE_MEMBERS_VERSION:
        (error,) = ctx.coordinator.leave_group(body.group_id, [body.member_id])
        return codec.encode_response(request, throttle_time_ms=0, error_code=error)
    member_ids = [m.member_id for m in body.members]
    errors = ctx.coordinator.leave_group(body.group_id, member_ids)
    cls = codec.response_class(ApiKey.LEAVE_GROUP)
    members = [
        cls.MemberResponse(member_id=mid, group_instance_id=None, error_code=error)
        for mid, error in zip(member_ids, errors, strict=True)
    ]
    return codec.encode_response(request, throttle_time_ms=0, error_code=ErrorCode.NONE, members=members)


async def handle_describe_groups(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    cls = codec.response_class(ApiKey.DESCRIBE_GROUPS)
    group_cls = cls.DescribedGroup
    with_offsets = await offset_groups(ctx)
    described = []
    for group_id in request.body.groups:
        if not_coordinator(ctx, group_id, GROUP):
            described.append(
                group_cls(
                    error_code=ErrorCode.NOT_COORDINATOR,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        group = ctx.coordinator.describe(group_id)
        state = group.state
        if state == GroupState.DEAD and group_id in with_offsets:
            state = GroupState.EMPTY  # no members, but committed offsets (from any door)
        described.append(
            group_cls(
                error_code=ErrorCode.NONE,
                group_id=group.group_id,
                group_state=state.value,
                protocol_type=group.protocol_type,
                protocol_data=group.protocol_name,
                members=[
                    group_cls.DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=None,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in group.members
                ],
            )
        )
    return codec.encode_response(request, throttle_time_ms=0, groups=described)


async def handle_list_groups(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    live = {
        g.group_id: (g.protocol_type, g.state.value)
        for g in ctx.coordinator.groups()
        if not not_coordinator(ctx, g.group_id, GROUP)  # left over from before a coordinator move
    }
    for group_id in await offset_groups(ctx):
        if not not_coordinator(ctx, group_id, GROUP):  # each broker lists the groups it coordinates
            live.setdefault(group_id, ("", GroupState.EMPTY.value))
    wanted_states = set(getattr(request.body, "states_filter", None) or ())
    cls = codec.response_class(ApiKey.LIST_GROUPS)
    groups = [
        cls.ListedGroup(group_id=group_id, protocol_type=protocol_type, group_state=state)
        for group_id, (protocol_type, state) in sorted(live.items())
        if not wanted_states or state in wanted_states
    ]
    return codec.encode_response(request, throttle_time_ms=0, error_code=ErrorCode.NONE, groups=groups)
