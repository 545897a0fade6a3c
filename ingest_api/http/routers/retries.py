"""The consumer retry ladder and dead letters (RocketMQ's send-back, %RETRY%group, %DLQ%group).

* ``PUT  /groups/{group}`` ``{"max_reconsume_times", "retry_queues"}`` and ``GET /groups/{group}/config``;
* ``POST /groups/{group}/messages:sendBack`` ``{"topic", "msg_id", "delay_level"?, "max_reconsume_times"?}``,
  or a list of them stored together (``Idempotency-Key`` as for produce);
* ``GET  /groups/{group}/dlq`` and ``POST /groups/{group}/dlq/{msg_id}:resend``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from broker.auth import Right, authorize
from broker.membership import CONSUMER_GROUPS
from broker.peers import ask_others, is_local_request, passed_headers
from broker.retries import (
    SendBackItem,
    UnknownMessage,
    holds,
    resend_dead_letter,
)
from broker.routing import SCOPE_HEADER
from broker.sendbacks import group_configs, send_back_here
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http import producing
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.fields import JSON_INTEGER, Int32, QueueCount, TopicName
from ingest_api.http.schemas import ErrorOut, MessageOut, ProduceOut
from ingest_api.params import GroupPath, IdempotencyKeyHeader
from store import UnknownTopic, dlq_topic

router = APIRouter(
    prefix="/groups", tags=["retry"], responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}}
)


ReconsumeTimes = Annotated[int, Field(ge=0, le=10_000), JSON_INTEGER]


class GroupConfigIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_reconsume_times: ReconsumeTimes | None = Field(None, description="Send-backs before the DLQ (16).")
    retry_queues: QueueCount | None = Field(None, description="Queues of %RETRY%group (1).")


class GroupConfigOut(BaseModel):
    group: str
    max_reconsume_times: int
    retry_queues: int


class SendBackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: TopicName
    msg_id: str = Field(min_length=1, max_length=128, description="offsetMsgId or UNIQ_KEY.")
    delay_level: Int32 = Field(
        0,
        json_schema_extra={"minimum": -1},  # below -1: 400 invalid_argument (retries.send_back)
        description="0 = the ladder (3 + reconsume times), -1 = the DLQ.",
    )
    max_reconsume_times: ReconsumeTimes | None = None


class SendBackOut(BaseModel):
    group: str
    topic: str
    msg_id: str
    uniq_key: str | None
    request_id: str = Field(
        description="The send-back request's id (duplicates of one attempt give one retry)."
    )
    attempt: int = Field(description="Reconsume times of the message sent back.")
    outcome: str = Field(description="retry or dlq")
    delay_level: int
    target_topic: str


class DeadLettersOut(BaseModel):
    group: str
    topic: str
    messages: list[MessageOut]
    next_offset: int


@router.put("/{group}", response_model=GroupConfigOut)
async def put_group_config(
    group: GroupPath, body: GroupConfigIn, broker: BrokerDep, principal: PrincipalDep
) -> GroupConfigOut:
    """Create or change a consumer group's retry settings (RocketMQ subscription group config)."""
    authorize(principal, Right.CONSUME, f"%RETRY%{group}")
    doc = await run_blocking(group_configs(broker).put, group, body.max_reconsume_times, body.retry_queues)
    if broker.cluster is not None:  # whichever broker receives a send-back of this group applies it
        await run_blocking(broker.cluster.put_setting, CONSUMER_GROUPS, group, dict(doc))
    return GroupConfigOut(group=group, **doc)


@router.get("/{group}/config", response_model=GroupConfigOut)
async def get_group_config(group: GroupPath, broker: BrokerDep, principal: PrincipalDep) -> GroupConfigOut:
    authorize(principal, Right.CONSUME, f"%RETRY%{group}")
    doc = group_configs(broker).get(group) or {"max_reconsume_times": 16, "retry_queues": 1}
    return GroupConfigOut(group=group, **doc)


_JSON = msgspec.json.Encoder()

#: Most messages one send-back request may carry.
MAX_SENDBACK_BATCH = 10_000


@router.post("/{group}/messages:sendBack", response_model=SendBackOut | list[SendBackOut])
async def send_back_messages(
    group: GroupPath,
    body: SendBackIn | Annotated[list[SendBackIn], Field(min_length=1, max_length=MAX_SENDBACK_BATCH)],
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> Response | SendBackOut | list[SendBackOut]:
    """Send messages this group failed to consume back into the retry ladder (or the DLQ): one
    object, or a list of them stored together (all or none; a refusal names the item's index).
    An ``Idempotency-Key`` makes a retried request store nothing new. In a cluster each message
    is sent back by the broker that stores it, and its retry lands on that broker's own queues
    of ``%RETRY%group``."""
    items = body if isinstance(body, list) else [body]
    for item in items:
        authorize(principal, Right.CONSUME, item.topic)
    try:
        results = await _send_back_here(
            broker, group, items, idempotency_key, request.headers.get(SCOPE_HEADER)
        )
    except (UnknownMessage, UnknownTopic):
        if is_local_request(broker, request.headers):
            raise
        return await _send_back_at_holders(broker, group, body, request, idempotency_key)
    # SendBack has SendBackOut's fields in its order: msgspec renders a list of 10,000 without a
    # pydantic model each (they took a third of a batched send-back's time).
    answer = _JSON.encode(results if isinstance(body, list) else results[0])
    return Response(answer, media_type="application/json")


async def _send_back_here(
    broker: Broker, group: str, items: list[SendBackIn], key: str | None, scope: str | None
) -> list[Any]:
    """Store the send-back requests of messages this broker holds (one atomic append;
    :func:`broker.sendbacks.send_back_here`)."""
    producer = producing.idempotency_ref(f"sendback:{group}" + (f"#{scope}" if scope else ""), key)
    send_backs = [SendBackItem(i.topic, i.msg_id, i.delay_level, i.max_reconsume_times) for i in items]
    return list(await send_back_here(broker, group, send_backs, producer=producer))


async def _send_back_at_holders(
    broker: Broker,
    group: str,
    body: SendBackIn | list[SendBackIn],
    request: Request,
    key: str | None,
) -> Response:
    """Forward send-backs to the brokers that store their messages (404 naming one that no
    broker holds). One holder: the request as it came; several: one part each, deduplicated per
    broker (``{key}#{broker}``), answers merged in item order."""
    node = broker.cluster
    assert node is not None
    items = body if isinstance(body, list) else [body]
    holders: list[str] = []
    for i, item in enumerate(items):
        found = await ask_others(broker, f"/messages/{item.msg_id}", request.headers, {"topic": item.topic})
        held = node.serving and await run_blocking(holds, broker.store, group, item.topic, item.msg_id)
        here = node.name if held else None
        holder = here or next(iter(found), None)
        if holder is None:
            where = f"messages[{i}]: " if isinstance(body, list) else ""
            raise UnknownMessage(f"{where}no message {item.msg_id!r} in topic {item.topic!r} on any broker")
        holders.append(holder)
    groups: dict[str, list[int]] = {}
    for i, holder in enumerate(holders):
        groups.setdefault(holder, []).append(i)
    spans = len(groups) > 1
    answers: dict[int, Any] = {}
    for holder, indexes in groups.items():
        part = [items[i] for i in indexes]
        headers = {**passed_headers(request.headers), "content-type": "application/json"}
        if spans:
            headers[SCOPE_HEADER] = holder
        payload = part if isinstance(body, list) else part[0]
        content = (
            json.dumps([p.model_dump(exclude_none=True) for p in payload]).encode()
            if isinstance(payload, list)
            else payload.model_dump_json(exclude_none=True).encode()
        )
        answer = await broker.peers.request(
            node.view.master_of(holder), holder, "POST", f"/groups/{group}/messages:sendBack",
            headers=headers, content=content,
        )  # fmt: skip
        if answer.status_code != 200 or not spans:
            return Response(answer.content, status_code=answer.status_code, media_type="application/json")
        for i, result in zip(indexes, answer.json(), strict=True):
            answers[i] = result
    return Response(json.dumps([answers[i] for i in range(len(items))]), media_type="application/json")


@router.get("/{group}/dlq", response_model=DeadLettersOut)
async def list_dead_letters(
    group: GroupPath,
    broker: BrokerDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    max_messages: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DeadLettersOut:
    """The group's dead letters (``%DLQ%group`` queue 0), oldest first, a page at a time."""
    topic = dlq_topic(group)
    authorize(principal, Right.CONSUME, topic)
    store = broker.store
    if not store.has_topic(topic):
        return DeadLettersOut(group=group, topic=topic, messages=[], next_offset=0)
    start = max(offset, store.min_offset(topic, 0))
    got = await run_blocking(store.get_messages, topic, 0, start, max_messages)
    return DeadLettersOut(
        group=group,
        topic=topic,
        messages=[MessageOut.of(v) for v in got.messages],
        next_offset=got.next_offset,
    )


@router.post("/{group}/dlq/{msg_id}:resend", response_model=ProduceOut, status_code=201)
async def resend(
    group: GroupPath,
    msg_id: Annotated[str, Path(min_length=1, max_length=128)],
    broker: BrokerDep,
    principal: PrincipalDep,
) -> ProduceOut:
    """Produce a dead letter again to its original topic (same UNIQ_KEY, reconsume times 0)."""
    authorize(principal, Right.CONSUME, dlq_topic(group))
    result = await run_blocking(resend_dead_letter, broker.store, group, msg_id)
    authorize(principal, Right.PRODUCE, result.topic)
    return ProduceOut.of(result)
