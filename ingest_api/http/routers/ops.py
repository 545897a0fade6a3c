"""Operations: ``/healthz``, ``/metrics`` (Prometheus), and the OpenAPI spec and docs."""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Request, Response
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from broker.auth import authorize_global_admin
from broker.errors import BrokerError
from broker.metrics import render
from broker.replication import replica_status
from broker.threads import run_blocking
from cluster import SessionState
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.gauges import cluster_gauges, collect_store_gauges, owned_by
from ingest_api.http.schemas import ClusterHealthOut, ErrorOut, HealthOut

router = APIRouter(tags=["ops"])

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


@router.get(
    "/healthz",
    response_model=HealthOut,
    response_model_exclude_none=True,
    responses={503: {"model": ErrorOut}},
)
async def healthz(broker: BrokerDep) -> HealthOut:
    """200 while the store is open and every background service of the store (index thread,
    flushes, offset persistence, retention, group commit) works; 503 naming the failing ones
    otherwise. Never needs a token. In a cluster it also reports the ZooKeeper session: a broker
    cut off from ZooKeeper still serves the queues it owns, and answers 200 ``degraded``."""
    if broker.store.closed:
        raise BrokerError(503, "store_closed", "the store is closed")
    health = broker.store.health()
    if not health.ok:
        failing = health.failing()
        raise BrokerError(
            503,
            "store_degraded",
            "failing store services: "
            + "; ".join(f"{s.name} ({s.failures} failures, last: {s.last_error})" for s in failing),
            services=[s.name for s in failing],
        )
    node = broker.cluster
    if node is None:
        return HealthOut(status="ok", cluster=None)
    cluster = node.health()
    state = ClusterHealthOut(
        broker=node.name,
        session=str(cluster.session),
        registered=cluster.registered,
        warnings=list(cluster.warnings),
    )
    ok = cluster.session is SessionState.CONNECTED and cluster.registered and not cluster.warnings
    return HealthOut(status="ok" if ok else "degraded", cluster=state)


@router.get("/metrics", response_class=Response, responses={200: {"content": {PROMETHEUS_TEXT: {}}}})
async def metrics(broker: BrokerDep, principal: PrincipalDep) -> Response:
    """Prometheus text: the broker's name and cluster, traffic per door, sizes, latencies, queue
    offsets, group lag (messages and seconds) and storage figures (docs/metrics.md)."""
    authorize_global_admin(principal)
    node = broker.cluster
    owns = owned_by(node.view, node.name) if node is not None else None
    gauges = await run_blocking(collect_store_gauges, broker.store, owns)
    cluster = cluster_gauges(node, broker.store)
    if broker.replica is not None:
        cluster = replace(cluster, replication=await run_blocking(replica_status, broker))
    text = render(broker.metrics, gauges, cluster)
    if broker.operators is not None:
        text += await run_blocking(broker.operators.metrics_text)
    return Response(text, media_type=PROMETHEUS_TEXT)


@router.get("/openapi.json", include_in_schema=False)
async def openapi_spec(request: Request, _: PrincipalDep, internal: bool = False) -> JSONResponse:
    """The OpenAPI document; ``?internal=true`` adds the operations the operator job and the
    Spark sink call (``x-internal: true``)."""
    return JSONResponse(request.app.openapi(internal=internal))


@router.get("/docs", include_in_schema=False)
async def swagger_ui(request: Request, _: PrincipalDep) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{request.app.title} - API docs")
