"""What the cluster is and where each queue lives, as every door describes it (HTTP's ``/cluster``
and ``/topics/{topic}/route``, the console's cluster page; RocketMQ's NameServer routes are built
from the same view).

Every broker answers the same (they all follow ZooKeeper's watches). A lone broker (no
``--cluster``) answers too, as a cluster of one named ``local``, so route-aware clients work
against either.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.auth import Principal, Right, authorize, may_any
from broker.errors import BrokerError
from broker.peers import PeerUnavailable
from broker.replication import replica_status
from broker.state import Broker
from cluster import BrokerGroup, MemberInfo
from store import UnknownTopic, is_system_topic, validate_topic

#: The broker name a lone broker answers with.
LOCAL_BROKER = "local"


def self_url(broker: Broker) -> str:
    host = broker.config.host if broker.config.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    scheme = "http" if broker.config.tls is None else "https"
    return f"{scheme}://{host}:{broker.config.port}"


async def describe_cluster(broker: Broker) -> dict[str, Any]:
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
                    "http": self_url(broker),
                    "kafka": None,
                    "member_id": None,
                    "queues": sum(topics.values()),
                }
            ],
            "topics": len(topics),
            "warnings": [],
        }
    health = node.health()
    described = node.view.describe()
    await _add_replicas(broker, described["brokers"])
    return {
        "mode": "cluster",
        "cluster": str(node.config.address),
        "self": node.name,
        "self_member": node.member.member_id if node.member else None,
        "session": str(health.session),
        **described,
        "warnings": list(health.warnings),
    }


async def _add_replicas(broker: Broker, brokers: list[dict[str, Any]]) -> None:
    """Each replica group's members with role, epoch, replicated offset and lag in bytes (each
    live member asked for its own status; the master's view of its slaves gives the lag)."""
    node = broker.cluster
    assert node is not None
    view = node.view

    async def status_of(member: MemberInfo) -> dict[str, Any] | None:
        if node.member is not None and member.member_id == node.member.member_id:
            return replica_status(broker)
        try:
            answer = await broker.peers.request(member, member.broker_name, "GET", "/replica/status")
        except PeerUnavailable:
            return None
        return answer.json() if answer.status_code == 200 and answer.content != b"{}" else None

    for row in brokers:
        group = view.group(row["name"])
        if group.state is None:
            continue
        statuses = await asyncio.gather(*(status_of(m) for m in group.members))
        lag = {
            slave["member_id"]: slave["lag_bytes"]
            for status in statuses
            if status is not None and status["role"] == "master"
            for slave in status["slaves"]
        }
        row["epoch"] = group.state.epoch
        row["in_sync"] = sorted(group.state.sync_state_set)
        row["members"] = [
            {
                "member_id": member.member_id,
                "http": member.http,
                "role": status["role"] if status else "unknown",
                "epoch": status["epoch"] if status else None,
                "replicated_offset": status["max_offset"] if status else None,
                "confirm_offset": status["confirm_offset"] if status else None,
                "lag_bytes": 0 if member.member_id == group.master_id else lag.get(member.member_id),
            }
            for member, status in zip(group.members, statuses, strict=True)
        ]


async def topic_route(topic: str, broker: Broker, principal: Principal | None) -> dict[str, Any]:
    """Every queue id of the topic with its broker name, whether that broker is alive, and its
    HTTP and Kafka addresses (a dead broker shows its last known addresses). A system topic
    (parked, half and send-back records) is each broker's own: its route is the asked broker."""
    if principal is not None and not may_any(principal, topic):
        authorize(principal, Right.CONSUME, topic)
    validate_topic(topic, allow_system=True)
    node = broker.cluster
    if node is None:
        if not broker.store.has_topic(topic):
            raise UnknownTopic(f"topic {topic!r} does not exist")
        url = self_url(broker)
        queues = [
            {"queue_id": q, "broker": LOCAL_BROKER, "alive": True, "http": url, "kafka": None}
            for q in range(broker.store.queue_count(topic))
        ]
        return {"topic": topic, "queues": queues}
    route = node.view.route(topic)
    if route is None and is_system_topic(topic) and broker.store.has_topic(topic):
        # a broker's own system topic (parked, half, send-back records): every queue is here
        me = node.member
        http, kafka = (me.http, me.kafka) if me else (self_url(broker), None)
        count = broker.store.queue_count(topic)
        return {
            "topic": topic,
            "queues": [
                {"queue_id": q, "broker": node.name, "alive": True, "http": http, "kafka": kafka}
                for q in range(count)
            ],
        }
    if route is None:
        raise BrokerError(404, "unknown_topic", f"topic {topic!r} does not exist in the cluster")
    replicas = {name: _replicas(node.view.group(name)) for name in {r.broker_name for r in route}}
    return {
        "topic": topic,
        "queues": [
            {
                "queue_id": r.queue_id,
                "broker": r.broker_name,
                "alive": r.alive,
                "http": r.http,
                "kafka": r.kafka,
                "replicas": replicas[r.broker_name],
            }
            for r in route
        ],
    }


def _replicas(group: BrokerGroup) -> list[str]:
    """The live members' HTTP addresses, the master first (readFrom=replica picks a slave)."""
    return [m.http for m in sorted(group.members, key=lambda m: m.member_id != group.master_id)]
