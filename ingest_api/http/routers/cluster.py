"""``/cluster`` and ``/topics/{topic}/route``: the brokers and where each queue lives.

Every broker answers the same (they all follow ZooKeeper's watches). A lone broker (no
``--cluster``) answers too, as a cluster of one named ``local``, so route-aware clients work
against either.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from ingest_api.http.auth import Right, authorize
from ingest_api.http.broker import Broker
from ingest_api.http.deps import BrokerDep, PrincipalDep
from ingest_api.http.errors import ApiError
from ingest_api.http.params import TopicPath
from ingest_api.http.schemas import ClusterOut, ErrorOut, TopicRouteOut
from store import UnknownTopic, is_system_topic, validate_topic

router = APIRouter(tags=["cluster"])

#: The broker name a lone broker answers with.
LOCAL_BROKER = "local"


def _self_url(broker: Broker) -> str:
    host = broker.config.host if broker.config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{host}:{broker.config.port}"


@router.get("/cluster", response_model=ClusterOut)
async def describe_cluster(broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """The brokers (name, addresses, alive, queue count), this broker's name and its
    ZooKeeper session. A lone broker answers ``mode: single``."""
    node = broker.cluster
    if node is None:
        topics = broker.store.topics()
        return {
            "mode": "single",
            "self": LOCAL_BROKER,
            "session": None,
            "brokers": [
                {
                    "name": LOCAL_BROKER,
                    "alive": True,
                    "http": _self_url(broker),
                    "kafka": None,
                    "member_id": None,
                    "queues": sum(topics.values()),
                }
            ],
            "topics": len(topics),
            "warnings": [],
        }
    health = node.health()
    return {
        "mode": "cluster",
        "cluster": str(node.config.address),
        "self": node.name,
        "session": str(health.session),
        **node.view.describe(),
        "warnings": list(health.warnings),
    }


@router.get("/topics/{topic}/route", response_model=TopicRouteOut, responses={404: {"model": ErrorOut}})
async def topic_route(topic: TopicPath, broker: BrokerDep, principal: PrincipalDep) -> dict[str, Any]:
    """Every queue id of the topic with its broker name, whether that broker is alive, and its
    HTTP and Kafka addresses (a dead broker shows its last known addresses). A system topic
    (parked, half and send-back records) is each broker's own: its route is the asked broker."""
    if principal is not None and not principal.may_any(topic):
        authorize(principal, Right.CONSUME, topic)
    validate_topic(topic, allow_system=True)
    node = broker.cluster
    if node is None:
        if not broker.store.has_topic(topic):
            raise UnknownTopic(f"topic {topic!r} does not exist")
        url = _self_url(broker)
        queues = [
            {"queue_id": q, "broker": LOCAL_BROKER, "alive": True, "http": url, "kafka": None}
            for q in range(broker.store.queue_count(topic))
        ]
        return {"topic": topic, "queues": queues}
    route = node.view.route(topic)
    if route is None and is_system_topic(topic) and broker.store.has_topic(topic):
        # a broker's own system topic (parked, half, send-back records): every queue is here
        me = node.member
        http, kafka = (me.http, me.kafka) if me else (_self_url(broker), None)
        broker.store.queue_count(topic)
        return {
            "topic": topic,
            "queues": [
                {"queue_id": q, "broker": node.name, "alive": True, "http": http, "kafka": kafka}
                for q in queues
            ],
        }
    if route is None:
        raise ApiError(404, "unknown_topic", f"topic {topic!r} does not exist in the cluster")
    return {
        "topic": topic,
        "queues": [
            {
                "queue_id": r.queue_id,
                "broker": r.broker_name,
                "alive": r.alive,
                "http": r.http,
                "kafka": r.kafka,
            }
            for r in route
        ],
    }
