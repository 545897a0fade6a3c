"""The overview's live charts: a small in-process ring of broker samples, taken every few seconds.

Each sample holds rates since the previous one (messages and bytes in/out per second, over
every door), produce latency quantiles from the histogram's change, and the total group lag.
The ring is bounded (``capacity`` samples, one hour at the default 5 s), so the console never
grows a stats database in the broker (RabbitMQ's management DB is the cautionary tale). Lag
is summed over at most ``MAX_LAG_PAIRS`` (group, topic) pairs per sample.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from broker.metrics import BrokerMetrics, Histogram
from broker.state import Broker
from broker.threads import run_blocking
from store import MessageStore, SparkMQError

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_S = 5.0
CAPACITY = 720
MAX_LAG_PAIRS = 200


@dataclass(frozen=True)
class Totals:
    """Monotonic counters at one instant."""

    at_s: float
    messages_in: float
    bytes_in: float
    messages_out: float
    bytes_out: float
    latency_buckets: tuple[int, ...]


@dataclass(frozen=True)
class Sample:
    time_s: float
    in_msgs_per_s: float
    in_bytes_per_s: float
    out_msgs_per_s: float
    out_bytes_per_s: float
    #: Produce latency quantiles (ms) over the interval; ``None`` when nothing was produced.
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    total_lag: int


def _bucket_totals(histogram: Histogram) -> tuple[int, ...]:
    counts = [0] * (len(histogram.buckets) + 1)
    for _, state in histogram.snapshot():
        for index, count in enumerate(state.bucket_counts):
            counts[index] += count
        counts[-1] += state.count - sum(state.bucket_counts)
    return tuple(counts)


def totals(metrics: BrokerMetrics, at_s: float) -> Totals:
    return Totals(
        at_s,
        metrics.messages_in.total(),
        metrics.bytes_in.total(),
        metrics.messages_out.total(),
        metrics.bytes_out.total(),
        _bucket_totals(metrics.produce_latency),
    )


def quantile_ms(buckets: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """Upper bound (ms) of the bucket holding quantile ``q`` of ``counts`` (last = overflow)."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            bound = buckets[index] if index < len(buckets) else buckets[-1] * 2
            return bound * 1000
    return buckets[-1] * 2000


def total_lag(store: MessageStore) -> int:
    lag = 0
    pairs = 0
    for group, topics in store.groups().items():
        for topic in topics:
            if pairs >= MAX_LAG_PAIRS:
                return lag
            if store.has_topic(topic):
                lag += sum(store.lag(group, topic).values())
                pairs += 1
    return lag


class Sampler:
    """Turns successive :class:`Totals` into :class:`Sample` rates, keeping the last ``capacity``."""

    def __init__(self, buckets: Sequence[float], capacity: int = CAPACITY) -> None:
        self.buckets = tuple(buckets)
        self.samples: deque[Sample] = deque(maxlen=capacity)
        self._previous: Totals | None = None

    def add(self, now: Totals, lag: int) -> Sample | None:
        previous, self._previous = self._previous, now
        if previous is None or now.at_s <= previous.at_s:
            return None
        span = now.at_s - previous.at_s
        deltas = [b - a for a, b in zip(previous.latency_buckets, now.latency_buckets, strict=True)]
        sample = Sample(
            time_s=now.at_s,
            in_msgs_per_s=(now.messages_in - previous.messages_in) / span,
            in_bytes_per_s=(now.bytes_in - previous.bytes_in) / span,
            out_msgs_per_s=(now.messages_out - previous.messages_out) / span,
            out_bytes_per_s=(now.bytes_out - previous.bytes_out) / span,
            latency_p50_ms=quantile_ms(self.buckets, deltas, 0.5),
            latency_p99_ms=quantile_ms(self.buckets, deltas, 0.99),
            total_lag=lag,
        )
        self.samples.append(sample)
        return sample

    def series(self) -> dict[str, list[float | None]]:
        """Column-wise samples, as uPlot wants them (``time`` in seconds)."""
        rows = list(self.samples)
        return {
            "time": [s.time_s for s in rows],
            "in_msgs": [s.in_msgs_per_s for s in rows],
            "out_msgs": [s.out_msgs_per_s for s in rows],
            "in_bytes": [s.in_bytes_per_s for s in rows],
            "out_bytes": [s.out_bytes_per_s for s in rows],
            "p50_ms": [s.latency_p50_ms for s in rows],
            "p99_ms": [s.latency_p99_ms for s in rows],
            "lag": [float(s.total_lag) for s in rows],
        }


async def _sample_forever(broker: Broker, sampler: Sampler, interval_s: float) -> None:
    while True:
        try:
            lag = await run_blocking(total_lag, broker.store)
        except SparkMQError as exc:  # e.g. the store closing under a sample: the chart shows a gap
            log.warning("console sampler: cannot read group lag: %s", exc)
            lag = 0
        sampler.add(totals(broker.metrics, time.time()), lag)
        await asyncio.sleep(interval_s)


@asynccontextmanager
async def sampling(broker: Broker, interval_s: float = SAMPLE_INTERVAL_S) -> AsyncIterator[Sampler]:
    """Run a sampler for the broker's lifetime (entered by the app's lifespan)."""
    sampler = Sampler(broker.metrics.produce_latency.buckets)
    broker.samples = sampler
    task = asyncio.create_task(_sample_forever(broker, sampler, interval_s), name="console-sampler")
    try:
        yield sampler
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
