"""POP consumption (competing consumers): receive, ack, change invisible time (docs/pop.md).

A table: request -> core call -> answer. The waiting of a receive is spent on the event loop
(:func:`broker.pop.waiting.receive_waiting`, shared with the gRPC door); in a cluster, handles
name their broker and acks go back to it (:mod:`broker.pop_routing`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from broker import pop_routing
from broker.auth import Right, authorize
from broker.errors import STATUS_BY_CODE
from broker.pop.waiting import receive_waiting
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.schemas import ErrorOut
from ingest_api.http.schemas.pop import (
    AckIn,
    AckOut,
    AckResultOut,
    ChangeInvisibleIn,
    ChangeInvisibleOut,
    PopMessageOut,
    ReceiveIn,
    ReceiveOut,
)
from ingest_api.params import GroupPath, TopicPath

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut},
    404: {"model": ErrorOut},
    409: {"model": ErrorOut},
    503: {"model": ErrorOut},
}

router = APIRouter(prefix="/groups", tags=["pop"], responses=_ERRORS)


@router.post("/{group}/topics/{topic}/messages:receive", response_model=ReceiveOut, dependencies=[JsonBody])
async def receive(
    group: GroupPath, topic: TopicPath, spec: ReceiveIn, broker: BrokerDep, principal: PrincipalDep
) -> ReceiveOut:
    """Up to ``max_messages`` messages of the topic, each invisible to the group's other
    consumers for ``invisible_ms``; with none ready, wait up to ``wait_ms`` (an empty list after
    it). In a cluster this broker's queues of the topic (ask every broker). 409
    ``group_kind_conflict`` for a group that commits offsets."""
    authorize(principal, Right.CONSUME, topic)
    got = await receive_waiting(
        broker.pop, group, topic, spec.max_messages, spec.invisible_ms, spec.wait_ms, spec.tags
    )
    name = broker.name
    messages = [
        PopMessageOut.received(
            r.message,
            pop_routing.outward(name, r.receipt_handle),
            r.delivery_attempt,
            r.invisible_until_ms,
            name,
        )
        for r in got
    ]
    return ReceiveOut(group=group, topic=topic, messages=messages)


@router.post("/{group}/messages:ack", response_model=AckOut, dependencies=[JsonBody])
async def ack(
    group: GroupPath, spec: AckIn, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> AckOut:
    """Ack each handle (the consume right on each handle's topic is needed): one result per
    handle, in order (a bad handle does not stop the good ones). The request is 200 even when
    some handles are refused: see each ``error``."""
    for topic in sorted(pop_routing.claimed_topics(spec.receipt_handles)):
        authorize(principal, Right.CONSUME, topic)
    results = await pop_routing.ack(broker, group, spec.receipt_handles, request.headers)
    out = [
        AckResultOut(
            receipt_handle=r.receipt_handle,
            ok=r.ok,
            error=r.code,
            status=None if r.ok else STATUS_BY_CODE.get(r.code or "", 503),
            message=r.detail or None,
        )
        for r in results
    ]
    return AckOut(group=group, results=out, acked=sum(1 for r in results if r.ok))


@router.post("/{group}/messages:changeInvisible", response_model=ChangeInvisibleOut, dependencies=[JsonBody])
async def change_invisible(
    group: GroupPath, spec: ChangeInvisibleIn, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> ChangeInvisibleOut:
    """Make the message invisible for ``invisible_ms`` from now; answers the new handle (the
    one sent stops working). 409 ``receipt_handle_expired``, 404 ``invalid_receipt_handle`` (malformed or
    not issued by this broker)."""
    for topic in pop_routing.claimed_topics([spec.receipt_handle]):
        authorize(principal, Right.CONSUME, topic)
    changed = await pop_routing.change_invisible(
        broker, group, spec.receipt_handle, spec.invisible_ms, request.headers
    )
    return ChangeInvisibleOut(
        group=group,
        receipt_handle=changed.receipt_handle,
        delivery_attempt=changed.delivery_attempt,
        invisible_until_ms=changed.invisible_until_ms,
        msg_id=changed.msg_id,
    )
