"""``/groups``: committed offsets, reset by time or to an end, and lag."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from broker import cluster_groups
from broker.auth import Right, authorize, authorize_global_admin
from broker.cluster_groups import local_name, placement_owners
from broker.errors import BrokerError
from broker.group_listing import GroupSummary, local_listing
from broker.lag import GroupQueueRow, group_topic_rows
from broker.offsets import commit_offsets
from broker.offsets import committed_offsets as offsets_of_group
from broker.peers import is_local_request, passed_headers
from broker.pop import GroupKind
from broker.resets import apply_reset, plan_reset
from broker.routing import FORWARDED_HEADER
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep, JsonBody, PrincipalDep
from ingest_api.http.schemas import (
    ErrorOut,
    GroupDescribeOut,
    GroupLagOut,
    GroupListOut,
    GroupOffsetsIn,
    GroupOffsetsOut,
    GroupQueueOut,
    GroupResetIn,
    GroupResetOut,
    GroupSummaryOut,
    KafkaMemberOut,
    PopCountsOut,
    QueueLagOut,
    ResetQueueOut,
)
from ingest_api.params import USER_TOPIC, GroupPath, TopicQuery
from store import (
    MessageStore,
    UnknownTopic,
    validate_group,
    validate_topic,
)

#: 409 ``group_kind_conflict``: the group is consumed by POP (receive / ack), not by offsets.
router = APIRouter(
    prefix="/groups",
    tags=["groups"],
    responses={400: {"model": ErrorOut}, 404: {"model": ErrorOut}, 409: {"model": ErrorOut}},
)


def _queue_count(store: MessageStore, group: str, topic: str) -> int:
    validate_group(group)
    validate_topic(topic)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return store.queue_count(topic)


def _offsets(store: MessageStore, group: str, topic: str) -> GroupOffsetsOut:
    queues = _queue_count(store, group, topic)
    committed = offsets_of_group(store, group, topic)
    offsets = {queue_id: committed.get(queue_id, -1) for queue_id in range(queues)}
    return GroupOffsetsOut(group=group, topic=topic, offsets=offsets, unavailable=None)


@router.get("", response_model=GroupListOut)
async def list_groups(request: Request, broker: BrokerDep, principal: PrincipalDep) -> GroupListOut:
    """Every group (in a cluster: of any broker, merged): ``groups`` maps each offset-based
    group to the topics it has offsets for; ``summaries`` lists every group, POP ones too, with
    its kind, topics and, for a POP group, its in-flight counts."""
    authorize_global_admin(principal)
    listing = await run_blocking(local_listing, broker.store, broker.pop)
    if not is_local_request(broker, request.headers):
        listing = await cluster_groups.cluster_listing(broker, request.headers, listing)
    return GroupListOut(groups=listing.offsets, summaries=[_summary_out(s) for s in listing.summaries])


def _summary_out(summary: GroupSummary) -> GroupSummaryOut:
    counts = summary.pop
    return GroupSummaryOut(
        group=summary.group,
        kind="pop" if summary.kind is GroupKind.POP else "offset",
        topics=list(summary.topics),
        pop=None if counts is None else PopCountsOut.model_validate(counts, from_attributes=True),
    )


@router.get("/{group}/offsets", response_model=GroupOffsetsOut)
async def get_offsets(
    group: GroupPath, topic: TopicQuery, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> GroupOffsetsOut:
    """The group's committed (next-to-consume) offset per queue; -1 where it never committed.
    In a cluster each queue's offset comes from its owner."""
    authorize(principal, Right.CONSUME, topic)
    if is_local_request(broker, request.headers):
        return await run_blocking(_offsets, broker.store, group, topic)
    return await _cluster_offsets(broker, group, topic, request)


async def _cluster_offsets(broker: Broker, group: str, topic: str, request: Request) -> GroupOffsetsOut:
    assert broker.cluster is not None
    validate_group(group)
    owners = cluster_groups.placement_owners(broker.cluster.view, topic)
    local = None
    if broker.store.has_topic(topic):
        local = (await run_blocking(_offsets, broker.store, group, topic)).offsets
    answers, unavailable = await cluster_groups.gather_topic(
        broker, topic, f"/groups/{group}/offsets", request.headers, {"topic": topic}, local,
        lambda body: {int(q): o for q, o in body["offsets"].items()},
    )  # fmt: skip
    offsets = cluster_groups.pick(owners, answers, -1)
    return GroupOffsetsOut(group=group, topic=topic, offsets=offsets, unavailable=unavailable or None)


def _commit(store: MessageStore, group: str, topic: str, offsets: dict[int, int]) -> GroupOffsetsOut:
    queues = _queue_count(store, group, topic)
    for queue_id, offset in sorted(offsets.items()):
        if queue_id >= queues:
            raise BrokerError(  # 409: the request conflicts with the topic's current state
                409, "unknown_queue", f"queue {queue_id} does not exist; topic {topic!r} has {queues}"
            )
        high = store.max_offset(topic, queue_id)
        if offset > high:
            raise BrokerError(
                409,
                "offset_out_of_range",
                f"offset {offset} for queue {queue_id} is past its max offset {high}",
            )
    commit_offsets(store, group, topic, offsets)
    return _offsets(store, group, topic)


#: A body naming a queue the topic lacks, or an offset past a queue's end.
_CONFLICT: dict[int | str, dict[str, Any]] = {409: {"model": ErrorOut}}


@router.put("/{group}/offsets", response_model=GroupOffsetsOut, dependencies=[JsonBody], responses=_CONFLICT)
async def put_offsets(
    group: GroupPath, spec: GroupOffsetsIn, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> GroupOffsetsOut:
    """Commit next-to-consume offsets, e.g. ``{"topic": "orders", "offsets": {"0": 12}}``. In a
    cluster each queue's offset is committed at the queue's owner."""
    authorize(principal, Right.CONSUME, spec.topic)
    if is_local_request(broker, request.headers):
        return await run_blocking(_commit, broker.store, group, spec.topic, dict(spec.offsets))
    validate_group(group)
    mine = await cluster_groups.split_commit(broker, group, spec.topic, dict(spec.offsets), request.headers)
    if mine:
        await run_blocking(_commit, broker.store, group, spec.topic, mine)
    return await _cluster_offsets(broker, group, spec.topic, request)


def _reset(
    store: MessageStore, group: str, spec: GroupResetIn, owns: Callable[[int], bool] = lambda _: True
) -> GroupResetOut:
    rows = plan_reset(
        store,
        group,
        spec.topic,
        spec.to or "timestamp",
        timestamp_ms=spec.timestamp_ms,
        shift_by=spec.shift_by,
        queue_id=spec.queue_id,
    )
    rows = [row for row in rows if owns(row.queue_id)]
    if not spec.dry_run:
        apply_reset(store, group, spec.topic, rows)
    return GroupResetOut(
        group=group,
        topic=spec.topic,
        dry_run=spec.dry_run,
        offsets={row.queue_id: row.target for row in rows},
        queues=[
            ResetQueueOut(
                queue_id=row.queue_id, current=row.current, target=row.target, change=row.change,
                min_offset=row.min_offset, max_offset=row.max_offset,
            )
            for row in rows
        ],
    )  # fmt: skip


@router.post("/{group}/reset", response_model=GroupResetOut, dependencies=[JsonBody], responses=_CONFLICT)
async def reset_offsets(
    group: GroupPath, spec: GroupResetIn, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> GroupResetOut:
    """Move every queue's offset (or ``queue_id``'s) to the first message stored at/after
    ``timestamp_ms``, to the ``earliest`` / ``latest`` offset, or ``shift`` it by ``shift_by``.
    With ``dry_run`` nothing is committed: the answer is the per-queue plan (current, target)."""
    authorize(principal, Right.CONSUME, spec.topic)
    if broker.cluster is None:
        return await run_blocking(_reset, broker.store, group, spec)
    validate_group(group)
    owns = partial(cluster_groups.owned, broker, spec.topic)
    local = None
    if broker.store.has_topic(spec.topic):
        local = await run_blocking(_reset, broker.store, group, spec, owns)
    if FORWARDED_HEADER in request.headers:
        return local or GroupResetOut(
            group=group, topic=spec.topic, dry_run=spec.dry_run, offsets={}, queues=[]
        )
    return await gather_resets(broker, group, spec, request.headers, local)


def _describe(store: MessageStore, group: str, topics: list[str] | None) -> list[GroupQueueRow]:
    validate_group(group)
    now_ms = store.now_ms()
    names = topics if topics is not None else store.groups().get(group, [])
    rows: list[GroupQueueRow] = []
    for topic in names:
        validate_topic(topic)
        if store.has_topic(topic):
            rows.extend(group_topic_rows(store, group, topic, now_ms))
    return rows


@router.get("/{group}", response_model=GroupDescribeOut)
async def describe_group(
    group: GroupPath,
    request: Request,
    broker: BrokerDep,
    principal: PrincipalDep,
    topic: Annotated[str | None, Query(**USER_TOPIC, description="Only this topic.")] = None,
) -> GroupDescribeOut:
    """Per topic and queue: committed offset, max offset, lag in messages and in seconds; for a
    Kafka group also its state and members. 404 when nothing is known of the group."""
    if topic is not None:
        authorize(principal, Right.CONSUME, topic)
    else:
        authorize_global_admin(principal)
    kafka = (
        next((g for g in broker.kafka_groups() if g.group_id == group), None) if broker.kafka_groups else None
    )
    rows = await run_blocking(_describe, broker.store, group, [topic] if topic else None)
    unavailable: list[str] = []
    kafka_state = kafka.state.name if kafka is not None else None
    members = [
        KafkaMemberOut(member_id=m.member_id, client_id=m.client_id, client_host=m.client_host)
        for m in (kafka.members if kafka is not None else ())
    ]
    if not is_local_request(broker, request.headers):
        rows, unavailable, remote = await cluster_groups.gather_describe(
            broker, group, topic, request.headers, rows
        )
        if kafka is None and remote is not None:
            kafka_state = remote["kafka_state"]
            members = [KafkaMemberOut.model_validate(m) for m in remote["members"]]
    is_kafka = kafka is not None or kafka_state is not None
    if not rows and not is_kafka:
        raise BrokerError(404, "group_not_found", f"group {group!r} has no committed offsets and no members")
    return GroupDescribeOut(
        group=group,
        kind="kafka" if is_kafka else "offset table",
        kafka_state=kafka_state,
        members=members,
        queues=[
            GroupQueueOut(
                topic=row.topic, queue_id=row.queue_id, committed_offset=row.committed,
                max_offset=row.max_offset, lag=row.lag, lag_seconds=row.lag_seconds,
            )
            for row in rows
        ],
        total_lag=sum(row.lag for row in rows),
        unavailable=unavailable or None,
    )  # fmt: skip


def _lag(store: MessageStore, group: str, topic: str) -> GroupLagOut:
    queues = _queue_count(store, group, topic)
    committed = offsets_of_group(store, group, topic)
    lags = store.lag(group, topic)
    rows = [
        QueueLagOut(
            queue_id=queue_id,
            committed_offset=committed.get(queue_id, -1),
            max_offset=store.max_offset(topic, queue_id),
            lag=lags.get(queue_id, 0),
        )
        for queue_id in range(queues)
    ]
    return GroupLagOut(
        group=group, topic=topic, queues=rows, total_lag=sum(row.lag for row in rows), unavailable=None
    )


@router.get("/{group}/lag", response_model=GroupLagOut)
async def get_lag(
    group: GroupPath, topic: TopicQuery, request: Request, broker: BrokerDep, principal: PrincipalDep
) -> GroupLagOut:
    """Per queue: max offset - committed offset (a queue never committed counts from its min
    offset), and the total. In a cluster each queue's row comes from its owner."""
    authorize(principal, Right.CONSUME, topic)
    if is_local_request(broker, request.headers):
        return await run_blocking(_lag, broker.store, group, topic)
    assert broker.cluster is not None
    validate_group(group)
    owners = cluster_groups.placement_owners(broker.cluster.view, topic)
    local = None
    if broker.store.has_topic(topic):
        local = {row.queue_id: row for row in (await run_blocking(_lag, broker.store, group, topic)).queues}
    answers, unavailable = await cluster_groups.gather_topic(
        broker, topic, f"/groups/{group}/lag", request.headers, {"topic": topic}, local,
        lambda body: {row["queue_id"]: QueueLagOut.model_validate(row) for row in body["queues"]},
    )  # fmt: skip
    picked = cluster_groups.pick(owners, answers, None)
    rows = [row for _, row in sorted(picked.items()) if row is not None]
    return GroupLagOut(
        group=group,
        topic=topic,
        queues=rows,
        total_lag=sum(r.lag for r in rows),
        unavailable=unavailable or None,
    )


async def gather_resets(
    broker: Broker, group: str, spec: GroupResetIn, headers: Mapping[str, str], local: GroupResetOut | None
) -> GroupResetOut:
    """The reset asked of every owner of the topic (each resets its own queues); rows merged."""
    node = broker.cluster
    assert node is not None
    owners = placement_owners(node.view, spec.topic)
    served = local if local_name(broker) is not None else None
    rows: dict[int, ResetQueueOut] = {row.queue_id: row for row in (served.queues if served else ())}
    for name in sorted(set(owners) - {local_name(broker)}):
        answer = await broker.peers.request(
            node.view.master_of(name),
            name,
            "POST",
            f"/groups/{group}/reset",
            headers={**passed_headers(headers), "content-type": "application/json"},
            content=spec.model_dump_json(exclude_none=True).encode(),
        )
        if answer.status_code != 200:
            body = answer.json()
            raise BrokerError(
                answer.status_code, body.get("error", "peer_error"), body.get("message", ""), broker=name
            )
        for row in answer.json()["queues"]:
            if owners[row["queue_id"]] == name:
                rows[row["queue_id"]] = ResetQueueOut.model_validate(row)
    ordered = [rows[q] for q in sorted(rows)]
    return GroupResetOut(
        group=group,
        topic=spec.topic,
        dry_run=spec.dry_run,
        offsets={row.queue_id: row.target for row in ordered},
        queues=ordered,
    )
