"""``spark.read`` / ``spark.readStream`` ``.format("sparkmq")``: ConsumeQueue offsets as Spark offsets.

A thin adapter over PySpark's Python Data Source contract (see ``docs/spark_source.md`` and
``../shared/reference/spark_datasource.md``):

* the DataSource parses its options at ``load()`` (``schema()`` is called there) so a bad
  option fails early with its name in the message;
* the stream reader plans micro-batches on the driver over per-queue offsets
  (:mod:`streaming.offsets`), honours ``ReadMaxRows`` and ``Trigger.AvailableNow`` and
  mirrors progress into the broker's offsetTable (:class:`GroupMirror`);
* ``read()`` runs on executors, is stateless, and yields ``pyarrow.RecordBatch``es straight
  from the store's vectorised batch read (or the broker's Arrow IPC), tags filtered there.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from store import RETRY_TOPIC_PREFIX, DataLost, GetStatus, SparkMQError, present_retry
from streaming.admission import MinTriggerGate
from streaming.backends import Backend, BackendError, backend_for, is_backend_fault
from streaming.cluster_backend import ClusterBackend
from streaming.offsets import (
    CLOCK_KEY,
    Offsets,
    QueueRange,
    fair_share_end,
    group_ranges,
    normalize,
    queue_key,
    ranges_between,
    split_key,
    without_clock,
)
from streaming.options import (
    EARLIEST_SENTINEL,
    LATEST_SENTINEL,
    EndKind,
    SourceOptions,
    StartingPosition,
    StartKind,
)
from streaming.schemas import MESSAGE_DDL, MESSAGE_STRUCT, shape_batches

__all__ = ["MESSAGE_DDL", "MESSAGE_STRUCT", "SparkMQBatchReader", "SparkMQStreamReader"]

log = logging.getLogger(__name__)

#: How long ``read()`` waits for a planned range to become readable (a reader view that lags
#: the writer by a flush) before failing the task.
READ_CATCH_UP_TIMEOUT_S = 10.0


@dataclass
class QueueRangesPartition(InputPartition):
    """One Spark task: a few ConsumeQueue ranges (picklable; primitives only)."""

    ranges: tuple[QueueRange, ...]
    #: Endpoint mode: every broker address the driver has learnt (replica members included), so
    #: an executor whose configured endpoint died still finds the cluster.
    brokers: tuple[str, ...] = ()


# -- shared planning helpers -------------------------------------------------------------------


def _backend(options: SourceOptions) -> Backend:
    if options.path is not None:
        return backend_for("path", options.path)
    assert options.endpoint is not None
    return _cluster_backend(options)


def _cluster_backend(options: SourceOptions) -> Backend:
    """Every broker of the cluster ``endpoint`` belongs to (a lone broker: a cluster of one);
    a broker that is down fails the query, or is waited for when failOnDataLoss=false."""
    assert options.endpoint is not None
    return backend_for(
        "endpoint",
        options.endpoint,
        options.request_timeout_s,
        options.auth_token,
        wait_for_brokers=not options.fail_on_data_loss,
        read_from=options.read_from,
        tls_ca=options.tls_ca,
    )


def _mirror_backend(options: SourceOptions) -> Backend:
    """Group offsets go to the broker(s) when one is named, else to the store directory's owner."""
    if options.endpoint is not None:
        return _cluster_backend(options)
    return _backend(options)


class NoOffsetForTimestamp(SparkMQError):
    """``startingOffsetsByTimestampStrategy=error`` and a queue has no message at or after
    its starting timestamp (Kafka's "No offset matched" failure)."""

    code = "no_offset_for_timestamp"


def fetch_heads(backend: Backend, options: SourceOptions) -> dict[str, tuple[int, int]]:
    """``{"topic/queueId": (min_offset, max_offset)}`` for every subscribed queue (a pattern's
    topics are listed anew). A failed lookup is retried ``fetchOffset.numRetries`` times,
    ``fetchOffset.retryIntervalMs`` apart."""
    attempt = 0
    while True:
        try:
            return _heads_once(backend, options)
        except BackendError:
            if attempt >= options.fetch_retries:
                raise
            attempt += 1
            time.sleep(options.fetch_retry_interval_s)


def _heads_once(backend: Backend, options: SourceOptions) -> dict[str, tuple[int, int]]:
    subscription = options.subscription
    heads: dict[str, tuple[int, int]] = {}
    for topic in subscription.topics_now(backend.topics):
        for queue_id, bounds in backend.queue_heads(topic).items():
            if subscription.admits(topic, queue_id):
                heads[queue_key(topic, queue_id)] = bounds
    return {key: heads[key] for key in normalize(dict.fromkeys(heads, 0))}


def resolve_start(
    backend: Backend, options: SourceOptions, heads: Mapping[str, tuple[int, int]], default: StartKind
) -> Offsets:
    """Starting offset of every known queue (queues not named in JSON start at earliest)."""
    position = options.starting or StartingPosition(default)
    start: dict[str, int] = {}
    for key, (lo, hi) in heads.items():
        topic, queue_id = split_key(key)
        if position.kind is StartKind.EARLIEST:
            start[key] = lo
        elif position.kind is StartKind.LATEST:
            start[key] = hi
        elif position.kind is StartKind.TIMESTAMP:
            start[key] = _at_timestamp(backend, options, key, hi, position.timestamp_ms)
        elif position.kind is StartKind.TIMESTAMPS:
            ts = position.per_queue.get(topic, {}).get(queue_id)
            start[key] = lo if ts is None else _at_timestamp(backend, options, key, hi, ts)
        else:
            wanted = position.per_queue.get(topic, {}).get(queue_id, EARLIEST_SENTINEL)
            start[key] = lo if wanted == EARLIEST_SENTINEL else hi if wanted == LATEST_SENTINEL else wanted
    return normalize(start)


def _at_timestamp(backend: Backend, options: SourceOptions, key: str, hi: int, timestamp_ms: int) -> int:
    """The leftmost offset stored at or after ``timestamp_ms`` (``hi`` when none is)."""
    topic, queue_id = split_key(key)
    offset = backend.offset_for_timestamp(topic, queue_id, timestamp_ms)
    if offset >= hi and options.fail_on_no_timestamp_match:
        raise NoOffsetForTimestamp(
            f"{key}: no message stored at or after {timestamp_ms} (startingOffsetsByTimestampStrategy"
            "=error); use 'latest' to start such queues at their max offset"
        )
    return offset


def resolve_end(backend: Backend, options: SourceOptions, heads: Mapping[str, tuple[int, int]]) -> Offsets:
    """Exclusive end of a batch read: latest, JSON offsets (capped at latest) or timestamps."""
    end: dict[str, int] = {}
    ending = options.ending
    for key, (_, hi) in heads.items():
        topic, queue_id = split_key(key)
        if ending is None or ending.kind is EndKind.LATEST:
            end[key] = hi
        elif ending.kind is EndKind.TIMESTAMP:
            end[key] = min(hi, backend.offset_for_timestamp(topic, queue_id, ending.timestamp_ms))
        elif ending.kind is EndKind.TIMESTAMPS:
            ts = ending.per_queue.get(topic, {}).get(queue_id)
            end[key] = hi if ts is None else min(hi, backend.offset_for_timestamp(topic, queue_id, ts))
        else:
            wanted = ending.per_queue.get(topic, {}).get(queue_id, LATEST_SENTINEL)
            end[key] = hi if wanted == LATEST_SENTINEL else min(hi, wanted)
    return normalize(end)


def plan_partitions(
    options: SourceOptions, start: Mapping[str, int], end: Mapping[str, int]
) -> list[QueueRangesPartition]:
    """The non-empty ranges packed into about ``minPartitions`` tasks, grouped by the broker that
    serves them (a stable sort: key order within a broker), so that in a cluster each task reads
    from as few brokers as possible and the brokers serve the tasks in parallel."""
    target = options.min_partitions or _usable_cpus()
    backend = _backend(options)
    ranges = sorted(ranges_between(start, end), key=lambda r: backend.owner_of(r.topic, r.queue_id))
    if options.max_records_per_partition is not None:
        total = sum(r.size for r in ranges)
        target = max(target, -(-total // options.max_records_per_partition))
    brokers = backend.known_brokers if isinstance(backend, ClusterBackend) else ()
    return [QueueRangesPartition(group, brokers) for group in group_ranges(ranges, target)]


def _usable_cpus() -> int:
    """CPUs this (driver) process may run on: the default partition count per micro-batch."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _data_loss(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLost(
            f"{message}: messages this query has not read are gone (retention, or the queue was "
            "reset). Set failOnDataLoss=false to skip ahead to the earliest available offset instead"
        )
    log.warning("sparkmq: %s; skipping ahead (failOnDataLoss=false)", message)


def read_ranges(
    options: SourceOptions, ranges: Sequence[QueueRange], brokers: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    """Executor side: Arrow batches of ``ranges``, exactly the planned offsets (tags filtered).
    ``brokers``: addresses the driver learnt (endpoint mode), asked when the endpoint is down."""
    backend = _backend(options)
    if isinstance(backend, ClusterBackend):
        backend.learn(brokers)
    backend.refresh()
    try:
        yield from _read_ranges(options, backend, ranges)
    finally:  # the task is done with these bytes: its worker waits for the next batch
        backend.release_pages()


def _read_ranges(
    options: SourceOptions, backend: Backend, ranges: Sequence[QueueRange]
) -> Iterator[pa.RecordBatch]:
    for rng in ranges:
        offset = rng.start
        where = queue_key(rng.topic, rng.queue_id)
        deadline: float | None = None
        while offset < rng.end:
            want = min(options.read_chunk_messages, rng.end - offset)
            chunk = backend.read_range(
                rng.topic,
                rng.queue_id,
                offset=offset,
                end_offset=rng.end,
                max_messages=want,
                tags=options.tags,
            )
            if chunk.status in (GetStatus.FOUND, GetStatus.NO_MATCHED_MESSAGE):
                if chunk.next_offset <= offset:
                    raise BackendError(f"{where}: read at {offset} made no progress ({chunk.status})")
                if chunk.batch.num_rows:
                    yield (
                        present_retry(chunk.batch)
                        if rng.topic.startswith(RETRY_TOPIC_PREFIX)
                        else chunk.batch
                    )
                offset, deadline = chunk.next_offset, None
            elif chunk.status is GetStatus.OFFSET_TOO_SMALL:
                _data_loss(
                    options, f"{where}: offset {offset} is below the earliest available {chunk.min_offset}"
                )
                offset = max(offset + 1, chunk.min_offset)
            elif chunk.status is GetStatus.NO_MATCHED_LOGIC_QUEUE:
                _data_loss(options, f"{where} no longer exists (planned [{rng.start}, {rng.end}))")
                break
            else:
                # Planned from a head the reader does not see yet (a lagging view): wait a bit.
                deadline = deadline or time.monotonic() + READ_CATCH_UP_TIMEOUT_S
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"{where}: planned up to {rng.end} but the store reports "
                        f"{chunk.status.value} at {offset} (max offset {chunk.max_offset})"
                    )
                time.sleep(0.05)


# -- batch -------------------------------------------------------------------------------------


class SparkMQBatchReader(DataSourceReader):
    """``spark.read.format("sparkmq")``: ``[startingOffsets, endingOffsets)`` of every queue."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        backend = _backend(self.options)
        heads = fetch_heads(backend, self.options)
        start = resolve_start(backend, self.options, heads, StartKind.EARLIEST)
        end = resolve_end(backend, self.options, heads)
        return plan_partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRangesPartition)
        return shape_batches(read_ranges(self.options, partition.ranges, partition.brokers), self.options)


# -- streaming ---------------------------------------------------------------------------------


class GroupMirror:
    """Copies the query's durable progress into the broker's offsetTable (``topic@group``).

    Spark only calls ``latestOffset(start, ...)`` once every batch up to ``start`` is in the
    checkpoint's commits log, so ``start`` is the consumer offset of record at that moment
    and is what gets mirrored: when it changed, and either ``groupCommitIntervalMs`` passed
    since the last write or the query has caught up (``caught_up``: nothing left to plan,
    which is also how an AvailableNow run ends). See docs/spark_source.md for what this
    promises. Failures are logged and retried on the next trigger: the checkpoint, not the
    mirror, is the truth.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.last: Offsets | None = None
        self._written_at = -1.0e9

    def publish(self, offsets: Mapping[str, int], *, caught_up: bool = True) -> None:
        group = self.options.group
        if group is None or not offsets or dict(offsets) == self.last:
            return
        now = time.monotonic()
        if not caught_up and now - self._written_at < self.options.group_commit_interval_s:
            return
        per_topic: dict[str, dict[int, int]] = {}
        for key, offset in offsets.items():
            topic, queue_id = split_key(key)
            per_topic.setdefault(topic, {})[queue_id] = offset
        try:
            backend = _mirror_backend(self.options)
            for topic, queue_offsets in per_topic.items():
                backend.commit_group_offsets(group, topic, queue_offsets)
        except Exception as exc:
            if not is_backend_fault(exc):
                raise
            log.warning("sparkmq: could not mirror offsets of group %s (will retry): %s", group, exc)
            return
        self.last = normalize(offsets)
        self._written_at = now


class SparkMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ConsumeQueue offsets ``{"topic/queueId": next_offset}``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._initial: Offsets | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._heads: dict[str, tuple[int, int]] = {}
        self._heads_at = -1.0e9
        self._mirror = GroupMirror(options)
        least = options.min_messages_per_trigger
        self._gate = MinTriggerGate(least, options.max_trigger_delay_s) if least else None

    # driver -----------------------------------------------------------------------------------
    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (Spark's method name)
        # Called twice for the first batch: the answer must not move in between.
        if self._initial is None:
            backend = _backend(self.options)
            heads = fetch_heads(backend, self.options)
            self._initial = resolve_start(backend, self.options, heads, StartKind.LATEST)
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's method name)
        """``maxOffsetsPerTrigger`` as ``ReadMaxRows``; else ``minOffsetsPerTrigger`` as
        ``ReadMinRows``; else everything. (With both, the minimum is applied by the gate: PySpark
        has no composite limit.)"""
        most, least = self.options.max_messages_per_trigger, self.options.min_messages_per_trigger
        if most:
            return ReadMaxRows(most)
        return ReadMinRows(least) if least else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 (Spark's method name)
        heads = fetch_heads(_backend(self.options), self.options)
        self._target = normalize({key: hi for key, (_, hi) in heads.items()})

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:  # noqa: N802 (Spark's method name)
        end = self._latest_queues(without_clock(start), limit)
        interval = self.options.clock_interval_ms
        if interval and self._target is None:  # never in AvailableNow: its runs must end
            end = normalize({**end, CLOCK_KEY: int(time.time() * 1000) // interval})
        return end

    def _latest_queues(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        heads = self._current_heads()
        if any(key in heads and position > heads[key][1] for key, position in start.items()):
            heads = self._current_heads(force=True)  # never judge a queue "reset" on a cached head
        self._latest = normalize({key: hi for key, (_, hi) in heads.items()})
        target = self._target if self._target is not None else self._latest
        begin: dict[str, int] = {}
        for key, position in start.items():
            bounds = heads.get(key)
            begin[key] = position if bounds is None else self._checked_start(key, position, bounds)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if self._held_back(begin, target, limit):
            self._mirror.publish(start, caught_up=True)
            return normalize(start)
        end = fair_share_end(begin, {k: v for k, v in target.items() if k in begin}, max_rows)
        for key, (lo, _) in heads.items():
            if key not in start and key in target:
                end[key] = lo  # a new queue: registered at its earliest now, read from the next batch
        end = normalize(end)
        self._mirror.publish(start, caught_up=end == normalize(start))
        return end

    def _held_back(self, begin: Mapping[str, int], target: Mapping[str, int], limit: ReadLimit) -> bool:
        """``minOffsetsPerTrigger``: skip this planning step (never while draining: AvailableNow,
        or a ``ReadAllAvailable`` limit such as ``Trigger.Once``)."""
        if self._gate is None or self._target is not None or isinstance(limit, ReadAllAvailable):
            return False
        waiting = sum(max(0, target.get(key, position) - position) for key, position in begin.items())
        return self._gate.holds_back(waiting)

    def _current_heads(self, force: bool = False) -> dict[str, tuple[int, int]]:
        """Queue heads, looked up at most once per ``pollIntervalMs`` (Spark polls much faster)."""
        now = time.monotonic()
        if force or now - self._heads_at >= self.options.poll_interval_s:
            backend = _backend(self.options)
            self._heads = fetch_heads(backend, self.options)
            # this runs in the query's source runner, a process that lives as long as the query:
            # a store directory's ConsumeQueue pages the lookup mapped would stay in its RSS
            backend.release_pages()
            self._heads_at = now
        return self._heads

    def _checked_start(self, key: str, position: int, bounds: tuple[int, int]) -> int:
        lo, hi = bounds
        if position < lo:
            _data_loss(self.options, f"{key}: next offset {position} is below the earliest available {lo}")
            return lo
        if position > hi:
            _data_loss(
                self.options, f"{key}: next offset {position} is beyond the max offset {hi} (queue reset?)"
            )
            return hi
        return position

    def reportLatestOffset(self) -> dict[str, int] | None:  # noqa: N802 (Spark's method name)
        return dict(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return plan_partitions(self.options, without_clock(start), without_clock(end))

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: Spark calls this one batch late (and never for the last batch of an
        AvailableNow run); the group mirror is driven by ``latestOffset`` instead."""

    # executors --------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, QueueRangesPartition)
        return shape_batches(read_ranges(self.options, partition.ranges, partition.brokers), self.options)
