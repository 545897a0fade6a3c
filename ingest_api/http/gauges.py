"""What ``/metrics`` reads from the store and the cluster at scrape time (blocking: run in a
worker thread).

Costs are bounded per scrape: the age of the oldest unconsumed message is read for at most
``MAX_LAG_SECONDS_READS`` lagging queues (one message read each), so a broker with thousands of
groups still answers a scrape quickly (rocketmq-exporter #144 is the cautionary tale).

In a cluster each broker's store holds every routed topic with its full queue count, the
queues owned elsewhere staying empty: per-queue series are kept for the queues this broker
owns only (and for its local topics, which have no route), so summing over brokers counts
each queue once.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from broker.cluster_info import LOCAL_BROKER
from broker.metrics import ClusterGauges, StoreGauges
from cluster import ClusterNode, ClusterView, SessionState
from store import MessageStore

#: Whether this broker owns queue ``queue_id`` of ``topic``.
Owns = Callable[[str, int], bool]

#: Most message reads spent on ``sparkmq_group_lag_seconds`` in one scrape.
MAX_LAG_SECONDS_READS = 1000


def directory_bytes(root: Path) -> int:
    """Bytes allocated by the files under ``root`` (sparse or preallocated files count as on disk)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_blocks * 512
            except OSError:  # removed while walking (retention, a deleted topic)
                continue
    return total


def _oldest_age_s(store: MessageStore, min_offset: int, now_ms: int) -> float:
    view = store.get_by_commitlog_offset(min_offset)
    return 0.0 if view is None else max(0.0, (now_ms - view.store_timestamp_ms) / 1000)


def _lag_seconds(store: MessageStore, gauges: StoreGauges, now_ms: int) -> None:
    """Age of the oldest unconsumed message per (group, topic), within the read budget."""
    reads = 0
    for (group, topic, queue_id), lag in sorted(gauges.group_lag.items()):
        key = (group, topic)
        gauges.group_lag_seconds.setdefault(key, 0.0)
        if lag <= 0 or reads >= MAX_LAG_SECONDS_READS:
            continue
        committed = store.committed_offset(group, topic, queue_id)
        start = max(committed, gauges.queue_min_offsets.get((topic, queue_id), 0))
        reads += 1
        found = store.get_messages(topic, queue_id, start, 1).messages
        if found:
            age = max(0.0, (now_ms - found[0].store_timestamp_ms) / 1000)
            gauges.group_lag_seconds[key] = max(gauges.group_lag_seconds[key], age)


def owned_by(view: ClusterView, me: str) -> Owns:
    """Ownership as ``view`` routes it; a topic without a route (a system topic) is local."""

    def owns(topic: str, queue_id: int) -> bool:
        placement = view.placement(topic)
        return placement is None or (queue_id < placement.queue_count and placement.owners[queue_id] == me)

    return owns


def cluster_gauges(node: ClusterNode | None, store: MessageStore) -> ClusterGauges:
    """This broker's identity and its view of the cluster (a lone broker: ``local``, alone)."""
    if node is None:
        return ClusterGauges(broker=LOCAL_BROKER, mode="single", owned_queues=sum(store.topics().values()))
    view = node.view
    health = node.health()
    return ClusterGauges(
        broker=node.name,
        mode="cluster",
        cluster=str(node.config.address),
        brokers=len(view.queue_counts()),
        live_brokers=len(view.live_brokers()),
        owned_queues=view.queue_counts().get(node.name, 0),
        session=str(health.session),
        session_states=tuple(str(state) for state in SessionState),
        warnings=len(health.warnings),
    )


def collect_store_gauges(store: MessageStore, owns: Owns | None = None) -> StoreGauges:
    """The store's figures; with ``owns``, per-queue figures of the owned queues only."""
    stats = store.stats()
    now_ms = store.now_ms()
    topics = store.topics()
    mine = owns or (lambda topic, queue_id: True)
    gauges = StoreGauges(
        queue_max_offsets={key: offset for key, offset in stats.queue_max_offsets.items() if mine(*key)},
        dispatch_lag_bytes=stats.index_dispatch_lag_bytes,
        store_counters={
            "commitlog_min_offset": stats.commitlog_min_offset,
            "commitlog_max_offset": stats.commitlog_max_offset,
            "commitlog_flushed_offset": stats.commitlog_flushed_offset,
        },
        store_totals={"messages_put": stats.messages_put, "bytes_put": stats.bytes_put},
        topics=len(topics),
        services={s.name: (s.ok, s.failures) for s in store.health().services},
    )
    for topic in topics:
        for queue_id, (low, _) in store.queue_offsets(topic).items():
            if mine(topic, queue_id):
                gauges.queue_min_offsets[(topic, queue_id)] = low
    groups = store.groups()
    gauges.groups = len(groups)
    for group, group_topics in groups.items():
        for topic in group_topics:
            if not store.has_topic(topic):
                continue
            for queue_id, lag in store.lag(group, topic).items():
                if mine(topic, queue_id):
                    gauges.group_lag[(group, topic, queue_id)] = lag
    _lag_seconds(store, gauges, now_ms)
    store_dir = Path(store.config.store_dir)
    disk = shutil.disk_usage(store_dir)
    gauges.storage = {
        "bytes": directory_bytes(store_dir),
        "commitlog_bytes": stats.commitlog_max_offset - stats.commitlog_min_offset,
        "flush_behind_bytes": stats.commitlog_max_offset - stats.commitlog_flushed_offset,
        "oldest_message_age_seconds": _oldest_age_s(store, stats.commitlog_min_offset, now_ms)
        if stats.commitlog_max_offset > stats.commitlog_min_offset
        else 0.0,
        "disk_free_bytes": disk.free,
        "disk_total_bytes": disk.total,
    }
    return gauges
