"""What ``/metrics`` reads from the store at scrape time (blocking: run in a worker thread).

Costs are bounded per scrape: the age of the oldest unconsumed message is read for at most
``MAX_LAG_SECONDS_READS`` lagging queues (one message read each), so a broker with thousands of
groups still answers a scrape quickly (rocketmq-exporter #144 is the cautionary tale).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ingest_api.http.metrics import StoreGauges
from store import MessageStore

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


def collect_store_gauges(store: MessageStore) -> StoreGauges:
    stats = store.stats()
    now_ms = store.now_ms()
    topics = store.topics()
    gauges = StoreGauges(
        queue_max_offsets=dict(stats.queue_max_offsets),
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
            gauges.queue_min_offsets[(topic, queue_id)] = low
    groups = store.groups()
    gauges.groups = len(groups)
    for group, group_topics in groups.items():
        for topic in group_topics:
            if not store.has_topic(topic):
                continue
            for queue_id, lag in store.lag(group, topic).items():
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
