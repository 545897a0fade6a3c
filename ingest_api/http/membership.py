"""Joining the cluster for the broker's lifetime (``sparkmq serve --cluster``).

Entered by the app's lifespan right after the store opens and left right before it closes:
the member node appears once the store is ready to serve and disappears (at once, not after
the session timeout) on a clean stop. A refusal to join (a second broker of the same name, a
store directory of another broker, ZooKeeper unreachable) fails the start with its message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.concurrency import run_in_threadpool

from cluster import connect
from cluster.local_sync import LocalTopicSync
from ingest_api.http.broker import Broker
from ingest_api.http.peers import PeerClient
from ingest_api.http.routing import QueuePlanner


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
        broker.local_topics = sync
        yield
    finally:
        await peers.aclose()
        await run_in_threadpool(node.close)
