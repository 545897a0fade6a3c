"""``/cluster`` and ``/topics/{topic}/route``: the brokers and where each queue lives
(:mod:`broker.cluster_info` answers both)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from broker import cluster_info
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.schemas import ClusterOut, ErrorOut, TopicRouteOut
from ingest_api.params import AnyTopicPath

router = APIRouter(tags=["cluster"])


@router.get("/cluster", response_model=ClusterOut)
async def describe_cluster(broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """The brokers (name, addresses, alive, queue count), this broker's name and its
    ZooKeeper session. A lone broker answers ``mode: single``."""
    return await cluster_info.describe_cluster(broker)


@router.get("/topics/{topic}/route", response_model=TopicRouteOut, responses={404: {"model": ErrorOut}})
async def topic_route(topic: AnyTopicPath, broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every queue id of the topic with its broker name, whether that broker is alive, and its
    HTTP and Kafka addresses (a dead broker shows its last known addresses). A system topic
    (parked, half and send-back records) is each broker's own: its route is the asked broker."""
    return await cluster_info.topic_route(topic, broker, principal)
