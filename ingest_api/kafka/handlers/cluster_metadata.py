"""Metadata of a cluster: every live Kafka broker, and each partition's leader from the routes.

* ``brokers``: the live brokers that serve Kafka (:func:`topology.live_nodes`), this one always
  included; ``controller_id`` is this broker (any broker creates topics through ZooKeeper).
* Each partition's ``replicas`` and ``isr`` are its broker's replica group members and in-sync
  set (:func:`topology.replicas_of`; a broker without replicas is its only replica).
* A partition whose owner is down (or runs without a Kafka listener) is LEADER_NOT_AVAILABLE
  with leader -1 and the owner's last known node id as an offline replica, as Kafka reports an
  offline partition; clients keep its records queued and refresh metadata until it returns.
* Unknown topics are created through the cluster (``ClusterNode.ensure_topic``: the default
  queue count spread over the live brokers) when the request allows it (v4+ flag; always
  before) and the cluster's ``auto_create_topics`` is on; while ZooKeeper is unreachable or no
  broker is live that answers LEADER_NOT_AVAILABLE (retriable).
"""

from __future__ import annotations

import logging
from typing import Any

from cluster import ClusterError, CoordinationUnavailable, NoLiveBroker, TopicPlacement
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.names import from_store, to_store
from ingest_api.kafka.topology import KafkaNode, live_nodes, replicas_of
from store import InvalidArgument, is_system_topic

log = logging.getLogger(__name__)

TopicAnswer = tuple[str, ErrorCode, TopicPlacement | None]


def lookup_topics(link: ClusterLink, requested: list[str] | None, auto: bool) -> list[TopicAnswer]:
    """Blocking: the placement of every requested topic (``None``: every user topic)."""
    if requested is None:
        view = link.view
        return [
            (from_store(name), ErrorCode.NONE, placement)
            for name, placement in sorted(view.topics.items())
            if not is_system_topic(name)
        ]
    return [_one(link, name, auto) for name in requested]


def _one(link: ClusterLink, name: str, auto: bool) -> TopicAnswer:
    if is_system_topic(name):
        return name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    placement = link.placement(name)
    if placement is not None:
        return name, ErrorCode.NONE, placement
    if not (auto and link.node.config.auto_create_topics):
        return name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    try:
        return name, ErrorCode.NONE, link.node.ensure_topic(to_store(name))
    except InvalidArgument:
        return name, ErrorCode.INVALID_TOPIC_EXCEPTION, None
    except (CoordinationUnavailable, NoLiveBroker) as exc:
        log.info("metadata: topic %r not created yet: %s", name, exc)
        return name, ErrorCode.LEADER_NOT_AVAILABLE, None
    except ClusterError:
        log.exception("metadata: creating topic %r failed", name)
        return name, ErrorCode.UNKNOWN_SERVER_ERROR, None


def brokers(ctx: GatewayContext, link: ClusterLink) -> list[KafkaNode]:
    """The live Kafka brokers, this one included even while its registration is not visible."""
    nodes = live_nodes(link.view)
    if all(n.node_id != ctx.config.node_id for n in nodes):
        me = KafkaNode(ctx.config.node_id, ctx.advertised_host, ctx.advertised_port, link.me)
        nodes = sorted([*nodes, me], key=lambda n: n.node_id)
    return nodes


def partitions(cls: Any, link: ClusterLink, placement: TopicPlacement) -> list[Any]:
    """Metadata partition entries of one topic, leaders from the routes."""
    partition_cls = cls.MetadataResponseTopic.MetadataResponsePartition
    view = link.view
    out = []
    by_owner = {owner: replicas_of(view, owner) for owner in set(placement.owners)}
    for index, owner in enumerate(placement.owners):
        group = by_owner[owner]
        fields: dict[str, Any] = {
            "error_code": ErrorCode.NONE if group.leader is not None else ErrorCode.LEADER_NOT_AVAILABLE,
            "leader_id": group.leader.node_id if group.leader is not None else -1,
            "replica_nodes": list(group.replicas),
            "isr_nodes": list(group.isr),
            "offline_replicas": list(group.offline),
        }
        out.append(partition_cls(partition_index=index, leader_epoch=0, **fields))
    return out
