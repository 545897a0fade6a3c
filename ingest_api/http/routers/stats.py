"""``GET /stats``: the broker's figures as JSON (what ``sparkmq status`` prints)."""

from __future__ import annotations

from fastapi import APIRouter

import sparkmq
from broker.auth import authorize_global_admin
from broker.metrics import Counter
from broker.threads import run_blocking
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.schemas import StatsOut
from store import MessageStore

router = APIRouter(tags=["ops"])


def _by_door(counter: Counter) -> dict[str, float]:
    doors: dict[str, float] = {}
    for labels, value in counter.samples():
        door = dict(labels).get("door", "http")
        doors[door] = doors.get(door, 0.0) + value
    return doors


def _store_figures(store: MessageStore) -> tuple[int, int, dict[str, int]]:
    stats = store.stats()
    figures = {
        "messages_put": stats.messages_put,
        "bytes_put": stats.bytes_put,
        "commitlog_min_offset": stats.commitlog_min_offset,
        "commitlog_max_offset": stats.commitlog_max_offset,
        "commitlog_flushed_offset": stats.commitlog_flushed_offset,
        "index_dispatch_lag_bytes": stats.index_dispatch_lag_bytes,
    }
    return len(store.topics()), len(store.groups()), figures


@router.get("/stats", response_model=StatsOut)
async def stats(broker: BrokerDep, principal: PrincipalDep) -> StatsOut:
    """Topic and group counts, CommitLog positions and traffic per door since the start (needs
    admin on ``*`` when auth is on, as ``/metrics``)."""
    authorize_global_admin(principal)
    topics, groups, figures = await run_blocking(_store_figures, broker.store)
    return StatsOut(
        version=sparkmq.__version__,
        topics=topics,
        groups=groups,
        messages_in=_by_door(broker.metrics.messages_in),
        messages_out=_by_door(broker.metrics.messages_out),
        **figures,
    )
