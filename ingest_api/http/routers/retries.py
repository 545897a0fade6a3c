"""The consumer retry ladder and dead letters (RocketMQ's send-back, %RETRY%group, %DLQ%group).

* ``PUT  /groups/{group}`` ``{"max_reconsume_times", "retry_queues"}`` and ``GET /groups/{group}/config``;
* ``POST /groups/{group}/messages:sendBack`` ``{"topic", "msg_id", "delay_level"?, "max_reconsume_times"?}``,
  or a list of them stored together (``Idempotency-Key`` as for produce);
* ``GET  /groups/{group}/dlq`` and ``POST /groups/{group}/dlq/{msg_id}:resend``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from ingest_api.http import producing
from ingest_api.http.auth import Right, authorize
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.errors import ApiError
from ingest_api.http.params import GroupPath
from ingest_api.http.retries import GroupConfigs, SendBackItem, as_dict, resend_dead_letter, send_back_many
from ingest_api.http.schemas import ErrorOut, MessageOut, ProduceOut
from store import dlq_topic

router = APIRouter(
    prefix="/groups", tags=["retry"], responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}}
)


class GroupConfigIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_reconsume_times: int | None = Field(
        None, ge=0, le=10_000, description="Send-backs before the DLQ (16)."
    )
    retry_queues: int | None = Field(None, ge=1, le=1024, description="Queues of %RETRY%group (1).")


class GroupConfigOut(BaseModel):
    group: str
    max_reconsume_times: int
    retry_queues: int


class SendBackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: str = Field(min_length=1, max_length=255)
    msg_id: str = Field(min_length=1, max_length=128, description="offsetMsgId or UNIQ_KEY.")
    delay_level: int = Field(
        0, ge=-(2**31), lt=2**31, description="0 = the ladder (3 + reconsume times), -1 = the DLQ."
    )
    max_reconsume_times: int | None = Field(None, ge=0, le=10_000)


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


def configs_of(broker: Any) -> GroupConfigs:
    board = broker.operators
    configs = getattr(board, "group_configs", None)
    if configs is None:
        raise ApiError(503, "retry_unavailable", "this broker has no group configuration")
    return configs  # type: ignore[no-any-return]


@router.put("/{group}", response_model=GroupConfigOut)
async def put_group_config(
    group: GroupPath, body: GroupConfigIn, broker: BrokerDep, principal: PrincipalDep
) -> GroupConfigOut:
    """Create or change a consumer group's retry settings (RocketMQ subscription group config)."""
    authorize(principal, Right.CONSUME, f"%RETRY%{group}")
    doc = await run_in_threadpool(configs_of(broker).put, group, body.max_reconsume_times, body.retry_queues)
    return GroupConfigOut(group=group, **doc)


@router.get("/{group}/config", response_model=GroupConfigOut)
async def get_group_config(group: GroupPath, broker: BrokerDep, principal: PrincipalDep) -> GroupConfigOut:
    authorize(principal, Right.CONSUME, f"%RETRY%{group}")
    doc = configs_of(broker).get(group) or {"max_reconsume_times": 16, "retry_queues": 1}
    return GroupConfigOut(group=group, **doc)


#: Most messages one send-back request may carry.
MAX_SENDBACK_BATCH = 10_000


@router.post("/{group}/messages:sendBack", response_model=SendBackOut | list[SendBackOut])
async def send_back_messages(
    group: GroupPath,
    body: SendBackIn | Annotated[list[SendBackIn], Field(min_length=1, max_length=MAX_SENDBACK_BATCH)],
    broker: BrokerDep,
    principal: PrincipalDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> SendBackOut | list[SendBackOut]:
    """Send messages this group failed to consume back into the retry ladder (or the DLQ): one
    object, or a list of them stored together (all or none; a refusal names the item's index).
    An ``Idempotency-Key`` makes a retried request store nothing new."""
    items = body if isinstance(body, list) else [body]
    for item in items:
        authorize(principal, Right.CONSUME, item.topic)
    producer = producing.idempotency_ref(f"sendback:{group}", idempotency_key)
    results = await run_in_threadpool(
        send_back_many,
        broker.store,
        configs_of(broker),
        group,
        [SendBackItem(i.topic, i.msg_id, i.delay_level, i.max_reconsume_times) for i in items],
        producer=producer,
    )
    out = [SendBackOut(**as_dict(r)) for r in results]
    return out if isinstance(body, list) else out[0]


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
    got = await run_in_threadpool(store.get_messages, topic, 0, start, max_messages)
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
    result = await run_in_threadpool(resend_dead_letter, broker.store, group, msg_id)
    authorize(principal, Right.PRODUCE, result.topic)
    return ProduceOut.of(result)
