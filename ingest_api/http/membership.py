"""Joining the cluster for the broker's lifetime (``sparkmq serve --cluster``).

Entered by the app's lifespan right after the store opens and left right before it closes:
the member node appears once the store is ready to serve and disappears (at once, not after
the session timeout) on a clean stop. A refusal to join (a second broker of the same name, a
store directory of another broker, ZooKeeper unreachable) fails the start with its message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.concurrency import run_in_threadpool

from cluster import ClusterNode, connect
from cluster.local_sync import LocalTopicSync
from ingest_api.http.broker import Broker
from ingest_api.http.forwarding import ForwardCoalescer
from ingest_api.http.peers import PeerClient
from ingest_api.http.routing import QueuePlanner

#: Setting kinds in ZooKeeper (``ClusterNode.put_setting``) and what they mirror here.
PRODUCER_GROUPS = "producer-groups"
CONSUMER_GROUPS = "consumer-groups"


def _mirror_settings(broker: Broker, node: ClusterNode) -> None:
    """Keep this broker's copies of the cluster-wide group settings in step with ZooKeeper: the
    check-back URL of a producer group is needed by whichever broker holds a transaction's
    halves, a consumer group's retry settings by whichever broker receives its send-backs."""
    board = broker.operators
    if board is None:
        return
    if board.transactions is not None:
        groups = board.transactions.groups

        def producer_group(name: str, document: dict[str, Any] | None) -> None:
            if document is None:
                groups.delete(name)
            elif (groups.get(name) or {}).get("check_url") != document["check_url"]:
                groups.put(name, str(document["check_url"]))

        node.watch_settings(PRODUCER_GROUPS, producer_group)
    configs = board.group_configs
    if configs is not None:

        def consumer_group(name: str, document: dict[str, Any] | None) -> None:
            if document is not None:
                configs.put(name, document.get("max_reconsume_times"), document.get("retry_queues"))

        node.watch_settings(CONSUMER_GROUPS, consumer_group)


@asynccontextmanager
async def cluster_membership(broker: Broker) -> AsyncIterator[None]:
    config = broker.config.cluster
    if config is None:
        yield
        return
    node = connect(config, broker.store.config.config_dir)
    await run_in_threadpool(node.start)
    peers = PeerClient(node.name, broker.config.forward_timeout_s)
    try:
        sync = LocalTopicSync(broker.store, node)
        await run_in_threadpool(sync.start)
        broker.cluster = node
        broker.planner = QueuePlanner(node.name)
        broker.peers = peers
        broker.forwarder = ForwardCoalescer(peers)
        broker.local_topics = sync
        await run_in_threadpool(_mirror_settings, broker, node)
        yield
    finally:
        await peers.aclose()
        await run_in_threadpool(node.close)
