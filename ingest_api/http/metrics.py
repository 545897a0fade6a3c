"""Prometheus text exposition (format 0.0.4) without a client library.

The broker counts what passes through HTTP (:class:`BrokerMetrics`); queue offsets, dispatch
lag and group lag are read from the store at scrape time and passed in as :class:`StoreGauges`.
Rendering is a pure function of those two values.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: Produce latency buckets, in seconds.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip

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

    def observe(self, labels: Labels, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        with self._lock:
            state = self._states.get(labels)
            if state is None:
                state = self._states[labels] = _HistogramState([0] * len(self.buckets))
            if index < len(self.buckets):
                state.bucket_counts[index] += 1
            state.total += value
            state.count += 1

    def snapshot(self) -> list[tuple[Labels, _HistogramState]]:
        with self._lock:
            return [
                (labels, _HistogramState(list(s.bucket_counts), s.total, s.count))
                for labels, s in sorted(self._states.items())
            ]


class BrokerMetrics:
    """What the HTTP layer counts itself."""

    def __init__(self) -> None:
        self.messages_in = Counter()
        self.bytes_in = Counter()
        self.messages_out = Counter()
        self.bytes_out = Counter()
        self.produce_latency = Histogram(LATENCY_BUCKETS_S)

    def produced(self, topic: str, messages: int, body_bytes: int, kind: str, seconds: float) -> None:
        labels = (("topic", topic),)
        self.messages_in.inc(labels, messages)
        self.bytes_in.inc(labels, body_bytes)
        self.produce_latency.observe((("kind", kind),), seconds)

    def consumed(self, topic: str, messages: int, body_bytes: int) -> None:
        if messages:
            labels = (("topic", topic),)
            self.messages_out.inc(labels, messages)
            self.bytes_out.inc(labels, body_bytes)


@dataclass
class StoreGauges:
    """Values read from the store when ``/metrics`` is scraped."""

    #: (topic, queue_id) -> max offset (next offset to be written).
    queue_max_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    #: CommitLog bytes written but not yet dispatched to ConsumeQueue/IndexFile.
    dispatch_lag_bytes: int = 0
    #: (group, topic, queue_id) -> lag in messages.
    group_lag: dict[tuple[str, str, int], int] = field(default_factory=dict)
    #: Store-level counters (name -> value), rendered as ``sparkmq_store_<name>``.
    store_counters: dict[str, float] = field(default_factory=dict)


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


def _counter(lines: list[str], name: str, help_text: str, counter: Counter) -> None:
    _family(lines, name, "counter", help_text)
    lines.extend(f"{name}{_labels(labels)} {_number(value)}" for labels, value in counter.samples())


def render(metrics: BrokerMetrics, gauges: StoreGauges) -> str:
    """The whole exposition as text (ends with a newline)."""
    lines: list[str] = []
    _counter(lines, "sparkmq_messages_in_total", "Messages produced over HTTP.", metrics.messages_in)
    _counter(lines, "sparkmq_bytes_in_total", "Body bytes produced over HTTP.", metrics.bytes_in)
    _counter(lines, "sparkmq_messages_out_total", "Messages pulled over HTTP.", metrics.messages_out)
    _counter(lines, "sparkmq_bytes_out_total", "Body bytes pulled over HTTP.", metrics.bytes_out)

    name = "sparkmq_produce_latency_seconds"
    _family(lines, name, "histogram", "Produce request latency in the store, by kind (single|batch).")
    for labels, state in metrics.produce_latency.snapshot():
        cumulative = 0
        for bound, count in zip(metrics.produce_latency.buckets, state.bucket_counts, strict=True):
            cumulative += count
            lines.append(f"{name}_bucket{_labels((*labels, ('le', repr(bound))))} {cumulative}")
        lines.append(f"{name}_bucket{_labels((*labels, ('le', '+Inf')))} {state.count}")
        lines.append(f"{name}_sum{_labels(labels)} {_number(state.total)}")
        lines.append(f"{name}_count{_labels(labels)} {state.count}")

    name = "sparkmq_queue_max_offset"
    _family(lines, name, "gauge", "Next offset to be written, per queue.")
    for (topic, queue_id), offset in sorted(gauges.queue_max_offsets.items()):
        lines.append(f"{name}{_labels((('topic', topic), ('queue_id', str(queue_id))))} {offset}")

    name = "sparkmq_dispatch_lag_bytes"
    _family(lines, name, "gauge", "CommitLog bytes not yet dispatched to ConsumeQueue and IndexFile.")
    lines.append(f"{name} {gauges.dispatch_lag_bytes}")

    name = "sparkmq_group_lag"
    _family(lines, name, "gauge", "Consumer group lag in messages (max offset - committed offset).")
    for (group, topic, queue_id), lag in sorted(gauges.group_lag.items()):
        labels = (("group", group), ("topic", topic), ("queue_id", str(queue_id)))
        lines.append(f"{name}{_labels(labels)} {lag}")

    for counter_name, value in sorted(gauges.store_counters.items()):
        name = f"sparkmq_store_{counter_name}"
        _family(lines, name, "gauge", f"Store statistic {counter_name}.")
        lines.append(f"{name} {_number(value)}")
    return "\n".join(lines) + "\n"
