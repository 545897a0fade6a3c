"""Prometheus text exposition (format 0.0.4) without a client library.

The broker counts what passes through its doors (:class:`BrokerMetrics`): HTTP, the Kafka
gateway and the exactly-once Spark sink each label their traffic with ``door``. Queue
offsets, lag, storage figures and group lag are read from the store at scrape time and
passed in as :class:`StoreGauges`; who this broker is and what it sees of its cluster as
:class:`ClusterGauges`. Rendering is a pure function of those values.

The broker's name: every broker exposes ``sparkmq_broker_info{broker, mode, cluster}`` (value
1; a lone broker is ``broker="local"``, ``mode="single"``), the usual info metric to join on.
In a cluster the per-topic, per-queue and per-group series also carry ``broker`` (as
rocketmq-exporter's do), so ``sum by (broker, topic)`` needs no join; process-wide series
(latencies, the store, storage) stay per scrape target, as Prometheus advises.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Produce latency buckets, in seconds.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
#: Request duration buckets (HTTP routes, Kafka APIs), in seconds; long polls land high.
REQUEST_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
#: Message body size buckets, in bytes (RocketMQ's le_1_kb ... le_4_mb).
SIZE_BUCKETS_BYTES: tuple[float, ...] = (
    128, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
)  # fmt: skip

#: The front doors a message can come through.
DOORS = ("http", "kafka", "sink")

Labels = tuple[tuple[str, str], ...]


class Counter:
    """A monotonically increasing value per label set."""

    def __init__(self) -> None:
        self._values: dict[Labels, float] = {}
        self._lock = threading.Lock()

    def inc(self, labels: Labels, amount: float = 1.0) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def samples(self) -> list[tuple[Labels, float]]:
        with self._lock:
            return sorted(self._values.items())

    def total(self) -> float:
        """The sum over every label set."""
        with self._lock:
            return sum(self._values.values())


@dataclass
class _HistogramState:
    bucket_counts: list[int]
    total: float = 0.0
    count: int = 0


class Histogram:
    """Cumulative-bucket histogram per label set."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self._states: dict[Labels, _HistogramState] = {}
        self._lock = threading.Lock()

    def observe(self, labels: Labels, value: float, count: int = 1) -> None:
        """Record ``value`` ``count`` times (a batch whose sizes are known only as a mean)."""
        index = bisect.bisect_left(self.buckets, value)
        with self._lock:
            state = self._states.get(labels)
            if state is None:
                state = self._states[labels] = _HistogramState([0] * len(self.buckets))
            if index < len(self.buckets):
                state.bucket_counts[index] += count
            state.total += value * count
            state.count += count

    def snapshot(self) -> list[tuple[Labels, _HistogramState]]:
        with self._lock:
            return [
                (labels, _HistogramState(list(s.bucket_counts), s.total, s.count))
                for labels, s in sorted(self._states.items())
            ]


class BrokerMetrics:
    """What the doors count themselves (thread-safe: doors count from worker threads too)."""

    def __init__(self) -> None:
        self.messages_in = Counter()
        self.bytes_in = Counter()
        self.messages_out = Counter()
        self.bytes_out = Counter()
        self.produce_latency = Histogram(LATENCY_BUCKETS_S)
        self.message_size = Histogram(SIZE_BUCKETS_BYTES)
        self.http_duration = Histogram(REQUEST_BUCKETS_S)
        self.kafka_duration = Histogram(REQUEST_BUCKETS_S)
        self.sink_batches = Counter()
        self.sink_rows = Counter()

    def produced(
        self, topic: str, messages: int, body_bytes: int, kind: str, seconds: float, door: str = "http"
    ) -> None:
        """``messages`` stored through ``door``; ``kind`` labels the produce latency
        (``single``/``batch`` over HTTP, ``kafka``)."""
        labels = (("door", door), ("topic", topic))
        self.messages_in.inc(labels, messages)
        self.bytes_in.inc(labels, body_bytes)
        self.produce_latency.observe((("kind", kind),), seconds)
        if messages:
            self.message_size.observe((("door", door),), body_bytes / messages, messages)

    def consumed(self, topic: str, messages: int, body_bytes: int, door: str = "http") -> None:
        if messages:
            labels = (("door", door), ("topic", topic))
            self.messages_out.inc(labels, messages)
            self.bytes_out.inc(labels, body_bytes)

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        labels = (("method", method), ("route", route), ("status", f"{status // 100}xx"))
        self.http_duration.observe(labels, seconds)

    def kafka_request(self, api: str, seconds: float) -> None:
        self.kafka_duration.observe((("api", api),), seconds)

    def sink_committed(self, rows: int, decided_now: bool, already_published: bool) -> None:
        """One exactly-once sink commit; ``rows`` count as produced only when first decided."""
        outcome = "replayed" if already_published or not decided_now else "published"
        self.sink_batches.inc((("outcome", outcome),))
        if outcome == "published":
            self.sink_rows.inc((), rows)
            # A batch may span topics and the staging layer reports only its row count, so
            # the sink door's messages are counted under topic "*".
            self.messages_in.inc((("door", "sink"), ("topic", "*")), rows)


@dataclass
class StoreGauges:
    """Values read from the store when ``/metrics`` is scraped."""

    #: (topic, queue_id) -> max offset (next offset to be written).
    queue_max_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: (topic, queue_id) -> min offset (the oldest retained message).
    queue_min_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: CommitLog bytes written but not yet dispatched to ConsumeQueue/IndexFile.
    dispatch_lag_bytes: int = 0
    #: (group, topic, queue_id) -> lag in messages.
    group_lag: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: (group, topic) -> age in seconds of the oldest unconsumed message (lagging pairs only,
    #: at most a scrape's budget of them).
    group_lag_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    #: Store-level positions (name -> value), rendered as gauges ``sparkmq_store_<name>``.
    store_counters: dict[str, float] = field(default_factory=dict)
    #: Store-level monotonic totals (name -> value), rendered as ``sparkmq_store_<name>_total``.
    store_totals: dict[str, float] = field(default_factory=dict)
    #: Storage figures (name -> value), rendered as gauges ``sparkmq_storage_<name>``.
    storage: dict[str, float] = field(default_factory=dict)
    topics: int = 0
    groups: int = 0
    #: Background service name -> (up: its last run succeeded, failures since start).
    services: dict[str, tuple[bool, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterGauges:
    """Who this broker is and what it sees of its cluster, at scrape time."""

    #: This broker's name (``local`` for a lone broker).
    broker: str
    #: ``cluster`` or ``single``.
    mode: str
    #: The ZooKeeper address the broker joined (``None`` alone).
    cluster: str | None = None
    #: Broker names known / with a live master (a lone broker: 1 / 1).
    brokers: int = 1
    live_brokers: int = 1
    #: Queues this broker owns, over every topic.
    owned_queues: int = 0
    #: The ZooKeeper session (``connected``, ``suspended``, ``lost``), ``None`` alone.
    session: str | None = None
    #: Every state the session can be in (rendered 1 for the current one, 0 for the others).
    session_states: tuple[str, ...] = ()
    #: Problems recorded for an operator (also on ``/healthz`` and ``GET /cluster``).
    warnings: int = 0
    #: A replica group member's replication status (``broker.replication.replica_status``).
    replication: dict[str, Any] | None = None

    @property
    def labelled(self) -> bool:
        """Whether series carry ``broker`` (only in a cluster, where the name means something)."""
        return self.mode == "cluster"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{name}="{_escape(value)}"' for name, value in labels)
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _family(lines: list[str], name: str, kind: str, help_text: str) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")


def _counter(lines: list[str], name: str, help_text: str, counter: Counter, extra: Labels = ()) -> None:
    """A counter family; ``extra`` labels (the broker's name) come first on every sample."""
    _family(lines, name, "counter", help_text)
    lines.extend(
        f"{name}{_labels((*extra, *labels))} {_number(value)}" for labels, value in counter.samples()
    )


def _histogram(lines: list[str], name: str, help_text: str, histogram: Histogram) -> None:
    _family(lines, name, "histogram", help_text)
    for labels, state in histogram.snapshot():
        cumulative = 0
        for bound, count in zip(histogram.buckets, state.bucket_counts, strict=True):
            cumulative += count
            lines.append(f"{name}_bucket{_labels((*labels, ('le', repr(float(bound)))))} {cumulative}")
        lines.append(f"{name}_bucket{_labels((*labels, ('le', '+Inf')))} {state.count}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(state.total)}")
        lines.append(f"{name}_count{_labels(labels)} {state.count}")


def _gauge(lines: list[str], name: str, help_text: str, value: float) -> None:
    _family(lines, name, "gauge", help_text)
    lines.append(f"{name} {_number(value)}")


_STORAGE_HELP = {
    "bytes": "Bytes of the store directory on disk (CommitLog, ConsumeQueues, index, metadata).",
    "commitlog_bytes": "CommitLog bytes retained (max offset - min offset).",
    "flush_behind_bytes": "CommitLog bytes written but not yet flushed to disk.",
    "oldest_message_age_seconds": "Age of the oldest retained message (the retention horizon).",
    "disk_free_bytes": "Free bytes on the store's file system.",
    "disk_total_bytes": "Size of the store's file system.",
}


def _render_traffic(lines: list[str], metrics: BrokerMetrics, broker: Labels = ()) -> None:
    _counter(lines, "sparkmq_messages_in_total", "Messages stored, by door (http|kafka|sink) and topic.",
             metrics.messages_in, broker)  # fmt: skip
    _counter(
        lines, "sparkmq_bytes_in_total", "Body bytes stored, by door and topic.", metrics.bytes_in, broker
    )
    _counter(lines, "sparkmq_messages_out_total", "Messages read by consumers, by door and topic.",
             metrics.messages_out, broker)  # fmt: skip
    _counter(lines, "sparkmq_bytes_out_total", "Body bytes read by consumers, by door and topic.",
             metrics.bytes_out, broker)  # fmt: skip
    _histogram(lines, "sparkmq_message_size_bytes",
               "Body size of stored messages, by door (batches count each message at the batch's mean).",
               metrics.message_size)  # fmt: skip
    _histogram(lines, "sparkmq_produce_latency_seconds",
               "Produce latency in the store, by kind (single|batch over HTTP, kafka).",
               metrics.produce_latency)  # fmt: skip
    _histogram(lines, "sparkmq_http_request_duration_seconds",
               "HTTP request duration by method, route template and status class.",
               metrics.http_duration)  # fmt: skip
    _histogram(lines, "sparkmq_kafka_request_duration_seconds",
               "Kafka gateway request duration by API.", metrics.kafka_duration)  # fmt: skip
    _counter(lines, "sparkmq_sink_batches_total",
             "Exactly-once sink commits, by outcome (published|replayed).", metrics.sink_batches)  # fmt: skip
    _counter(lines, "sparkmq_sink_rows_total", "Rows published by the exactly-once sink.", metrics.sink_rows)


def render(metrics: BrokerMetrics, gauges: StoreGauges, cluster: ClusterGauges | None = None) -> str:
    """The whole exposition as text (ends with a newline). Without ``cluster`` (unit tests of
    the other families) neither the broker's identity nor the cluster gauges are rendered."""
    lines: list[str] = []
    broker: Labels = (("broker", cluster.broker),) if cluster is not None and cluster.labelled else ()
    if cluster is not None:
        _render_cluster(lines, cluster)
    _render_traffic(lines, metrics, broker)

    name = "sparkmq_queue_max_offset"
    _family(lines, name, "gauge", "Next offset to be written, per queue.")
    for (topic, queue_id), offset in sorted(gauges.queue_max_offsets.items()):
        lines.append(f"{name}{_labels((*broker, ('topic', topic), ('queue_id', str(queue_id))))} {offset}")
    name = "sparkmq_queue_min_offset"
    _family(lines, name, "gauge", "Oldest retained offset, per queue.")
    for (topic, queue_id), offset in sorted(gauges.queue_min_offsets.items()):
        lines.append(f"{name}{_labels((*broker, ('topic', topic), ('queue_id', str(queue_id))))} {offset}")

    dispatch_help = "CommitLog bytes not yet dispatched to ConsumeQueue and IndexFile."
    _gauge(lines, "sparkmq_dispatch_lag_bytes", dispatch_help, gauges.dispatch_lag_bytes)
    _gauge(lines, "sparkmq_topics", "User topics.", gauges.topics)
    _gauge(lines, "sparkmq_groups", "Consumer groups with committed offsets.", gauges.groups)

    name = "sparkmq_store_service_up"
    _family(lines, name, "gauge", "1 while a store background service works, 0 while it is failing.")
    for service, (up, _) in sorted(gauges.services.items()):
        lines.append(f"{name}{_labels((('service', service),))} {int(up)}")
    name = "sparkmq_store_service_failures_total"
    _family(lines, name, "counter", "Failed runs of a store background service since the broker started.")
    for service, (_, failures) in sorted(gauges.services.items()):
        lines.append(f"{name}{_labels((('service', service),))} {failures}")

    _render_lag(lines, gauges, broker)

    for counter_name, value in sorted(gauges.store_counters.items()):
        _gauge(lines, f"sparkmq_store_{counter_name}", f"Store position {counter_name}.", value)
    for total_name, value in sorted(gauges.store_totals.items()):
        name = f"sparkmq_store_{total_name}_total"
        _family(lines, name, "counter", f"Store total {total_name} since the store was opened.")
        lines.append(f"{name} {_number(value)}")
    for storage_name, value in sorted(gauges.storage.items()):
        help_text = _STORAGE_HELP.get(storage_name, f"Storage figure {storage_name}.")
        _gauge(lines, f"sparkmq_storage_{storage_name}", help_text, value)
    return "\n".join(lines) + "\n"


def _render_lag(lines: list[str], gauges: StoreGauges, broker: Labels) -> None:
    name = "sparkmq_group_lag"
    _family(lines, name, "gauge", "Consumer group lag in messages (max offset - committed offset).")
    sums: dict[tuple[str, str], int] = {}
    for (group, topic, queue_id), lag in sorted(gauges.group_lag.items()):
        labels = (*broker, ("group", group), ("topic", topic), ("queue_id", str(queue_id)))
        lines.append(f"{name}{_labels(labels)} {lag}")
        sums[(group, topic)] = sums.get((group, topic), 0) + lag
    name = "sparkmq_group_lag_sum"
    _family(lines, name, "gauge", "Consumer group lag in messages, summed over the topic's queues.")
    for (group, topic), lag in sorted(sums.items()):
        lines.append(f"{name}{_labels((*broker, ('group', group), ('topic', topic)))} {lag}")
    name = "sparkmq_group_lag_seconds"
    age_help = "Age of the oldest unconsumed message per group and topic (0: caught up; bounded per scrape)."
    _family(lines, name, "gauge", age_help)
    for (group, topic), seconds in sorted(gauges.group_lag_seconds.items()):
        labels = (*broker, ("group", group), ("topic", topic))
        lines.append(f"{name}{_labels(labels)} {_number(round(seconds, 3))}")


def _render_cluster(lines: list[str], cluster: ClusterGauges) -> None:
    name = "sparkmq_broker_info"
    _family(
        lines, name, "gauge", "This broker: its name in the cluster (local when alone), mode and cluster."
    )
    info = (("broker", cluster.broker), ("mode", cluster.mode), ("cluster", cluster.cluster or ""))
    lines.append(f"{name}{_labels(info)} 1")
    _gauge(lines, "sparkmq_cluster_brokers", "Broker names known in the cluster (1 alone).", cluster.brokers)
    live_help = "Broker names with a live master, as this broker sees them."
    _gauge(lines, "sparkmq_cluster_live_brokers", live_help, cluster.live_brokers)
    _gauge(lines, "sparkmq_cluster_owned_queues", "Queues this broker owns, over every topic.",
           cluster.owned_queues)  # fmt: skip
    _gauge(lines, "sparkmq_cluster_warnings", "Cluster problems recorded for an operator (see GET /cluster).",
           cluster.warnings)  # fmt: skip
    if cluster.session is None:
        return
    name = "sparkmq_cluster_session"
    _family(lines, name, "gauge", "The ZooKeeper session: 1 for its current state, 0 for the others.")
    for state in cluster.session_states:
        lines.append(f"{name}{_labels((('state', state),))} {int(state == cluster.session)}")
    if cluster.replication:
        _render_replication(lines, cluster.replication)


def _render_replication(lines: list[str], status: dict[str, Any]) -> None:
    """A replica's role, epoch, offsets, its slaves' lag (on the master) and role changes."""
    member = (("member", str(status["member_id"])),)
    name = "sparkmq_replication_role"
    _family(lines, name, "gauge", "This member's role in its replica group: 1 for the current one.")
    for role in ("master", "slave", "standby", "fenced"):
        lines.append(f"{name}{_labels((*member, ('role', role)))} {int(status['role'] == role)}")
    for figure, help_text in (
        ("epoch", "The master epoch this member last saw (RocketMQ 5 / Kafka leader epoch)."),
        ("max_offset", "This member's CommitLog max offset."),
        ("confirm_offset", "What every in-sync member holds: readers see up to here."),
    ):
        _gauge(lines, f"sparkmq_replication_{figure}", help_text, status[figure])
    name = "sparkmq_replication_lag_bytes"
    _family(lines, name, "gauge", "On the master: how far each slave is behind, in bytes.")
    for slave in status.get("slaves") or ():
        lines.append(f"{name}{_labels((('slave', str(slave['member_id'])),))} {slave['lag_bytes']}")
    name = "sparkmq_replication_in_sync"
    _family(lines, name, "gauge", "Members in the group's in-sync set, as this member knows it.")
    lines.append(f"{name} {len(status.get('in_sync') or ())}")
    changes = status.get("role_changes") or {}
    for figure, help_text in (
        ("became_master", "Times this member started to lead its group (failovers it took over included)."),
        ("elections_won", "Elections this member won (a new epoch written by it)."),
        ("fences", "Times this member was fenced because its ZooKeeper connection was in doubt."),
        ("failed_role_changes", "Role changes that failed and were retried."),
    ):
        name = f"sparkmq_replication_{figure}_total"
        _family(lines, name, "counter", help_text)
        lines.append(f"{name} {changes.get(figure, 0)}")
    name = "sparkmq_replication_truncated_bytes_total"
    _family(lines, name, "counter", "Bytes this member truncated to rejoin its group (a divergent tail).")
    lines.append(f"{name} {status.get('truncated_bytes', 0)}")
