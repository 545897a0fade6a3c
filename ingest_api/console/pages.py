"""Console pages for reading the broker: overview (live charts), topics, one topic, groups, one group."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from broker.cluster_info import LOCAL_BROKER
from broker.errors import BrokerError
from broker.group_listing import local_listing
from broker.pop import GroupKind, PopService
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.console import data
from ingest_api.console.cluster import queue_owners
from ingest_api.console.web import PREFIX, Viewer, ViewerDep, page
from ingest_api.params import TopicPath
from store import (
    MessageStore,
    StoreStats,
    UnknownTopic,
    dlq_topic,
    validate_group,
    validate_topic,
    wall_clock_ms,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)

PageQuery = Annotated[int, Query(ge=1, le=1_000_000)]
SizeQuery = Annotated[int, Query(ge=1, le=data.MAX_PAGE_SIZE)]
FilterQuery = Annotated[str, Query(max_length=255)]


def now_ms() -> int:
    """The console's clock for ages and windows (the wall clock, read in one place)."""
    return wall_clock_ms()


def kafka_groups(broker: Broker) -> dict[str, data.KafkaGroupInfo]:
    """The Kafka coordinator's groups (read on the event loop, where the coordinator lives)."""
    if broker.kafka_groups is None:
        return {}
    return {
        group.group_id: data.KafkaGroupInfo(
            state=group.state.name,
            protocol=group.protocol_name,
            members=tuple(data.MemberRow(m.member_id, m.client_id, m.client_host) for m in group.members),
        )
        for group in broker.kafka_groups()
    }


@router.get("", response_class=RedirectResponse)
async def console_root() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


def _overview(store: MessageStore, viewer: Viewer, pop: PopService | None) -> tuple[StoreStats, int, int]:
    topics = [t for t in store.topics() if viewer.may_see(t)]
    return store.stats(), len(topics), len(local_listing(store, pop).summaries)


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request, viewer: ViewerDep) -> HTMLResponse:
    stats, topics, groups = await run_blocking(_overview, viewer.broker.store, viewer, viewer.broker.pop)
    return page(
        request,
        "overview.html",
        viewer,
        section="overview",
        stats=stats,
        topics=topics,
        groups=groups,
        kafka_groups=len(kafka_groups(viewer.broker)),
        sample_interval_s=viewer.broker.config.console_sample_interval_s,
    )


@router.get("/api/series", response_class=JSONResponse)
async def series(viewer: ViewerDep) -> JSONResponse:
    """The overview charts' samples, column-wise (uPlot's format); global admins only, as
    ``/metrics``."""
    viewer.require_global_admin()
    sampler = viewer.broker.samples
    return JSONResponse(sampler.series() if sampler is not None else {"time": []})


def _topics(
    store: MessageStore, viewer: Viewer, name: str, number: int, size: int
) -> data.Page[data.TopicRow]:
    names = data.matching([t for t in store.topics() if viewer.may_see(t)], name)
    cut = data.paginate(names, number, size)
    return data.Page(data.topic_rows(store, cut.items), cut.page, cut.page_size, cut.total)


@router.get("/topics", response_class=HTMLResponse)
async def topics(
    request: Request,
    viewer: ViewerDep,
    name: FilterQuery = "",
    page_number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
    size: SizeQuery = data.DEFAULT_PAGE_SIZE,
) -> HTMLResponse:
    rows = await run_blocking(_topics, viewer.broker.store, viewer, name, page_number, size)
    template = "topics_rows.html" if request.headers.get("hx-request") else "topics.html"
    return page(request, template, viewer, section="topics", rows=rows, name=name)


def _topic(store: MessageStore, topic: str) -> data.TopicDetail:
    validate_topic(topic)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return data.topic_detail(store, topic, now_ms())


@router.get("/topics/{topic}", response_class=HTMLResponse)
async def topic_detail(request: Request, topic: TopicPath, viewer: ViewerDep) -> HTMLResponse:
    viewer.require_read(topic)
    detail = await run_blocking(_topic, viewer.broker.store, topic)
    owners = {q["queue_id"]: q for q in await queue_owners(viewer, topic)}
    me = viewer.broker.name or LOCAL_BROKER
    return page(request, "topic.html", viewer, section="topics", topic=detail, owners=owners, me=me)


def _groups(
    store: MessageStore,
    viewer: Viewer,
    kafka: dict[str, data.KafkaGroupInfo],
    pop: PopService | None,
    name: str,
    number: int,
    size: int,
) -> data.Page[data.GroupRow]:
    """Offset and POP groups (:func:`local_listing`) with a topic the viewer may read, and for
    global admins the Kafka coordinator's groups."""
    summaries = {s.group: s for s in local_listing(store, pop).summaries}
    visible = {g for g, s in summaries.items() if any(viewer.may_read(t) for t in s.topics)}
    if viewer.is_global_admin:
        visible |= set(kafka)
    cut = data.paginate(data.matching(sorted(visible), name), number, size)
    rows = data.group_rows(store, cut.items, summaries, kafka, viewer.may_read, now_ms())
    return data.Page(rows, cut.page, cut.page_size, cut.total)


@router.get("/groups", response_class=HTMLResponse)
async def groups(
    request: Request,
    viewer: ViewerDep,
    name: FilterQuery = "",
    page_number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
    size: SizeQuery = data.DEFAULT_PAGE_SIZE,
) -> HTMLResponse:
    kafka = kafka_groups(viewer.broker)
    broker = viewer.broker
    rows = await run_blocking(_groups, broker.store, viewer, kafka, broker.pop, name, page_number, size)
    template = "groups_rows.html" if request.headers.get("hx-request") else "groups.html"
    return page(request, template, viewer, section="groups", rows=rows, name=name)


def _group(
    store: MessageStore,
    viewer: Viewer,
    group: str,
    kafka: dict[str, data.KafkaGroupInfo],
    pop: PopService | None,
) -> data.GroupDetail:
    validate_group(group)
    if pop is not None and pop.group_kind(group) is GroupKind.POP:
        return _pop_group(store, viewer, group, pop)
    topics = [t for t in store.groups().get(group, []) if viewer.may_read(t) and store.has_topic(t)]
    info = kafka.get(group)
    if not topics and info is None:
        raise BrokerError(404, "group_not_found", f"group {group!r} has no committed offsets you may read")
    detail = data.GroupDetail(group, "kafka" if info else "offset table", info)
    stamp = now_ms()
    for topic in topics:
        detail.queues.extend(data.group_topic_rows(store, group, topic, stamp))
    return detail


def _pop_group(store: MessageStore, viewer: Viewer, group: str, pop: PopService) -> data.GroupDetail:
    """A POP group: its in-flight counts (:meth:`PopService.stats`) and its DLQ's size."""
    stats = pop.stats(group)
    if not any(viewer.may_read(t) for t in stats.topics):
        raise BrokerError(404, "group_not_found", f"group {group!r} consumes no topic you may read")
    dlq = dlq_topic(group)
    dlq_messages = 0
    if store.has_topic(dlq):
        dlq_messages = sum(hi - lo for lo, hi in store.queue_offsets(dlq).values())
    return data.GroupDetail(group, "POP", None, pop=stats, dlq_messages=dlq_messages)


@router.get("/groups/{group}", response_class=HTMLResponse)
async def group_detail(request: Request, group: str, viewer: ViewerDep) -> HTMLResponse:
    kafka = kafka_groups(viewer.broker) if viewer.is_global_admin else {}
    detail = await run_blocking(_group, viewer.broker.store, viewer, group, kafka, viewer.broker.pop)
    topics = sorted({row.topic for row in detail.queues})
    return page(request, "group.html", viewer, section="groups", group=detail, topics=topics)


def _operators(broker: Broker) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    board = broker.operators
    if board is None:
        return {"mode": "off"}, []
    return board.job(), board.describe()


@router.get("/operators", response_class=HTMLResponse)
async def operators(request: Request, viewer: ViewerDep) -> HTMLResponse:
    """The operator job and each resolver query (``GET /operators``' data); admins on '*'."""
    viewer.require_global_admin()
    job, rows = await run_blocking(_operators, viewer.broker)
    return page(request, "operators.html", viewer, section="operators", job=job, rows=rows)
