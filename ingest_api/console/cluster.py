"""The console's Cluster page: the brokers, and which broker owns each queue of each topic.

It shows what ``GET /cluster`` and ``GET /topics/{t}/route`` answer (the same functions render
both), so a lone broker appears as a cluster of one named ``local``. Topics are paginated and
filtered before their routes are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from broker.cluster_info import describe_cluster, topic_route
from broker.errors import BrokerError
from ingest_api.console import data
from ingest_api.console.web import PREFIX, Viewer, ViewerDep, page
from store import UnknownTopic

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@dataclass(frozen=True)
class Placement:
    """One topic's queues grouped by owner: ``owners`` maps broker -> its queue ids."""

    topic: str
    queues: int
    owners: dict[str, list[int]]
    #: Owners that are not alive (their queues are unavailable).
    down: frozenset[str]


def placement(route: dict[str, Any]) -> Placement:
    owners: dict[str, list[int]] = {}
    down = set()
    for queue in route["queues"]:
        owners.setdefault(queue["broker"], []).append(queue["queue_id"])
        if not queue["alive"]:
            down.add(queue["broker"])
    return Placement(route["topic"], len(route["queues"]), owners, frozenset(down))


async def queue_owners(viewer: Viewer, topic: str) -> list[dict[str, Any]]:
    """Per queue id: ``broker``, ``alive`` and ``http`` (for the topic page); none for a topic
    without a route (one only this broker has)."""
    try:
        route = await topic_route(topic, viewer.broker, viewer.principal)
    except (BrokerError, UnknownTopic):
        return []
    return list(route["queues"])


@router.get("/cluster", response_class=HTMLResponse)
async def cluster_page(
    request: Request,
    viewer: ViewerDep,
    name: Annotated[str, Query(max_length=255)] = "",
    page_number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
    size: Annotated[int, Query(ge=1, le=data.MAX_PAGE_SIZE)] = data.DEFAULT_PAGE_SIZE,
) -> HTMLResponse:
    described = await describe_cluster(viewer.broker)
    names = data.matching([t for t in viewer.broker.store.topics() if viewer.may_see(t)], name)
    cut = data.paginate(names, page_number, size)
    placements = []
    for topic in cut.items:
        try:
            placements.append(placement(await topic_route(topic, viewer.broker, viewer.principal)))
        except (BrokerError, UnknownTopic):  # no route yet, or deleted meanwhile: shown without queues
            placements.append(Placement(topic, 0, {}, frozenset()))
    rows = data.Page(placements, cut.page, cut.page_size, cut.total)
    return page(request, "cluster.html", viewer, section="cluster", cluster=described, rows=rows, name=name)
