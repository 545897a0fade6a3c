"""The delay resolver: delay levels and timer messages delivered by a ``transformWithState`` query.

Input: the parked records of ``SCHEDULE_TOPIC_XXXX`` (18 level queues) and ``rmq_sys_wheel_timer``
(queue 0), read by the ``sparkmq`` source with system topics enabled. Each record becomes a
*pointer*, never a body copy: ``(commitlog_offset, due_ms, action_ms, kind, enqueue_ms)``.

* ``due_ms``: a level message is due at its store timestamp + the level's delay (RocketMQ's
  ConsumeQueue tagsCode, computed with the level table the resolver runs with); a timer message
  at ``TIMER_OUT_MS`` + precision (RocketMQ 5 rounds the requested time *up* to the next
  precision boundary, so delivery is never early).
* Key: ``(bucket_ms, shard)``: the due time rounded up to ``bucket_ms`` (100 ms), and a hash of
  (REAL_TOPIC, UNIQ_KEY) modulo the shard count, so a hot second spreads over partitions.
  One ``ListState`` of pointers and about one timer per key (operators.md §4.4: a timer per
  message runs at ~6k/s here, a timer per bucket at ~50k/s).
* On fire (processing time, ``timerValues`` only — never the wall clock, so a replayed batch
  computes the same output): every pointer whose action time has come is emitted, ordered by
  (due, CommitLog offset), at most ``burst_cap`` per key per batch (the rest re-arm the timer
  one millisecond later: catch-up after down-time is spread over batches). A timer message due
  further out than ``roll_window_ms`` is emitted as a ROLL when the window has passed, so no
  pointer outlives CommitLog retention (RocketMQ's roll).
* Each touched key also emits one summary row (pending count, next action time): the broker's
  ``GET /operators`` adds them up.

The output rows are relocation requests, published exactly once by the broker
(:mod:`store.publish.relocations`) through ``foreachBatch`` in :mod:`streaming.operators.runtime`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F  # noqa: N812 (Spark's idiom)
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"
KIND_LEVEL, KIND_TIMER = 0, 1
RELOCATE_DELIVER, RELOCATE_ROLL = 0, 1
ROW_RELOCATION, ROW_SUMMARY = 0, 1

PENDING_SCHEMA = StructType(
    [
        StructField("commitlog_offset", LongType()),
        StructField("due_ms", LongType()),
        StructField("action_ms", LongType()),
        StructField("kind", IntegerType()),
        StructField("enqueue_ms", LongType()),
        StructField("src_queue", IntegerType()),
        StructField("src_queue_offset", LongType()),
    ]
)

STATS_KEY_SCHEMA = StructType([StructField("queue", IntegerType())])
STATS_VALUE_SCHEMA = StructType(
    [
        StructField("count", LongType()),
        StructField("next_action_ms", LongType()),
        StructField("min_queue_offset", LongType()),
    ]
)

OUTPUT_SCHEMA = StructType(
    [
        StructField("row_type", IntegerType()),
        StructField("commitlog_offset", LongType()),
        StructField("kind", IntegerType()),
        StructField("enqueue_ms", LongType()),
        StructField("dequeue_ms", LongType()),
        StructField("due_ms", LongType()),
        StructField("bucket_ms", LongType()),
        StructField("shard", IntegerType()),
        StructField("pending", LongType()),
        StructField("next_action_ms", LongType()),
        #: Summary rows: the parked queue (level - 1; -1 for the timer topic) and the smallest
        #: queue offset still pending in this key (the broker mirrors delayOffset.json from it).
        StructField("src_queue", IntegerType()),
        StructField("min_queue_offset", LongType()),
    ]
)


@dataclass(frozen=True, slots=True)
class DelaySettings:
    """What the resolver query needs to know; all durations in ms."""

    level_delays_ms: tuple[int, ...]
    timer_precision_ms: int = 1000
    #: Width of a key's due-time bucket: a timer fires at the bucket's end, so a level message is
    #: at most this late from rounding (timer messages are due on precision boundaries anyway).
    bucket_ms: int = 100
    shards: int = 2
    #: Timer messages due further out than this are rolled (re-parked) instead of kept.
    roll_window_ms: int = 86_400_000
    #: Most pointers one key emits per batch (the rest follow in the next batches).
    burst_cap: int = 100_000


#: commitlog_offset, due_ms, action_ms, kind, enqueue_ms, src_queue, src_queue_offset
Pending = tuple[int, int, int, int, int, int, int]


def _stats(pending: Iterable[Pending]) -> dict[int, tuple[int, int, int]]:
    """Per parked queue: (count, earliest action ms, smallest queue offset)."""
    out: dict[int, tuple[int, int, int]] = {}
    for p in pending:
        old = out.get(p[5])
        out[p[5]] = (1, p[2], p[6]) if old is None else (old[0] + 1, min(old[1], p[2]), min(old[2], p[6]))
    return out


def action_time(due_ms: int, kind: int, now_ms: int, roll_window_ms: int) -> int:
    """When a pointer must be acted on: its due time, or the end of the roll window."""
    if kind == KIND_TIMER and due_ms - now_ms > roll_window_ms:
        return now_ms + roll_window_ms
    return due_ms


def fire(pending: Iterable[Pending], now_ms: int, burst_cap: int) -> tuple[list[Pending], list[Pending]]:
    """Split ``pending`` into (to emit now, in (due, offset) order, at most ``burst_cap``; to keep)."""
    ready: list[Pending] = []
    keep: list[Pending] = []
    for p in pending:
        (ready if p[2] <= now_ms else keep).append(p)
    ready.sort(key=lambda p: (p[1], p[0]))
    return ready[:burst_cap], keep + ready[burst_cap:]


def next_timer(keep: Iterable[Pending], now_ms: int) -> int | None:
    """The timer to arm for what is kept: ``now+1`` if some is already due (burst cap), else the
    earliest action time; None when nothing is kept."""
    times = [p[2] for p in keep]
    if not times:
        return None
    earliest = min(times)
    return now_ms + 1 if earliest <= now_ms else earliest


class DelayResolver(StatefulProcessor):
    """Keyed by (bucket_ms, shard); see the module docstring."""

    def __init__(self, settings: DelaySettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", PENDING_SCHEMA)
        #: Per parked queue of this key: (count, next action ms, min queue offset), so input
        #: batches update the summary without reading the pointer list back.
        self.stats = handle.getMapState("stats", STATS_KEY_SCHEMA, STATS_VALUE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:  # noqa: N802,N803 (Spark's names)
        now = timerValues.getCurrentProcessingTimeInMs()
        window = self.settings.roll_window_ms
        added: list[Pending] = []
        for row in rows:
            due, kind = int(row.due_ms), int(row.kind)
            added.append(
                (
                    int(row.commitlog_offset),
                    due,
                    action_time(due, kind, now, window),
                    kind,
                    int(row.enqueue_ms),
                    int(row.src_queue),
                    int(row.src_queue_offset),
                )
            )
        if added:
            self.pending.appendList([tuple(p) for p in added])
            # One timer per key for deliveries (the bucket's end, never before any due time in
            # it), plus one per distinct roll time: never a timer per message.
            bucket_end = int(key[0])
            for when in sorted({bucket_end if p[2] == p[1] else p[2] for p in added}):
                self.handle.registerTimer(when)
        for queue, new in sorted(_stats(added).items()):
            old = self.stats.getValue((queue,)) if self.stats.containsKey((queue,)) else None
            merged = new if old is None else (new[0] + old[0], min(new[1], old[1]), min(new[2], old[2]))
            self.stats.updateValue((queue,), merged)
            yield self._summary_row(key, queue, *merged)

    def handleExpiredTimer(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803 (the keyword Spark passes)
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[Row]:
        now = timerValues.getCurrentProcessingTimeInMs()
        emit, keep = fire(self._pending(), now, self.settings.burst_cap)
        if not emit:
            return
        if keep:
            self.pending.put([tuple(p) for p in keep])
            when = next_timer(keep, now)
            if when is not None and when != expiredTimerInfo.getExpiryTimeInMs():
                self.handle.registerTimer(when)
        else:
            self.pending.clear()
        self.stats.clear()
        remaining = _stats(keep)
        for queue, value in remaining.items():
            self.stats.updateValue((queue,), value)
        for offset, due, _action, kind, enqueue, _queue, _queue_offset in emit:
            relocate = RELOCATE_DELIVER if due <= now else RELOCATE_ROLL
            yield Row(
                row_type=ROW_RELOCATION,
                commitlog_offset=offset,
                kind=relocate,
                enqueue_ms=enqueue if kind == KIND_TIMER else 0,
                dequeue_ms=now,
                due_ms=due,
                bucket_ms=int(key[0]),
                shard=int(key[1]),
                pending=None,
                next_action_ms=None,
                src_queue=None,
                min_queue_offset=None,
            )
        yield from self._summary(key, keep, emit)

    def _pending(self) -> Iterator[Pending]:
        if not self.pending.exists():
            return iter(())
        return (tuple(int(v) for v in p) for p in self.pending.get())  # type: ignore[misc]

    def _summary(self, key: Any, pending: list[Pending], gone: Iterable[Pending]) -> Iterator[Row]:
        """One row per parked queue seen in this key: what is still pending there (0 clears it)."""
        stats = _stats(pending)
        for queue in sorted(set(stats) | {p[5] for p in gone}):
            count, next_ms, min_offset = stats.get(queue, (0, None, None))
            yield self._summary_row(key, queue, count, next_ms, min_offset)

    @staticmethod
    def _summary_row(key: Any, queue: int, count: int, next_ms: int | None, min_offset: int | None) -> Row:
        return Row(
            row_type=ROW_SUMMARY,
            commitlog_offset=None,
            kind=None,
            enqueue_ms=None,
            dequeue_ms=None,
            due_ms=None,
            bucket_ms=int(key[0]),
            shard=int(key[1]),
            pending=count,
            next_action_ms=next_ms,
            src_queue=queue,
            min_queue_offset=min_offset,
        )

    def close(self) -> None:
        pass


def due_column(settings: DelaySettings) -> Column:
    """``due_ms`` of a parked record, as a Spark expression over the source's columns."""
    levels = F.array(*[F.lit(int(ms)).cast("long") for ms in settings.level_delays_ms])
    level = F.least(
        F.greatest(F.col("properties")["DELAY"].cast("int"), F.lit(1)), F.lit(len(settings.level_delays_ms))
    )
    store_ms = F.unix_millis(F.col("store_timestamp"))
    timer_due = F.col("properties")["TIMER_OUT_MS"].cast("long") + F.lit(settings.timer_precision_ms)
    return F.when(F.col("topic") == TIMER_TOPIC, timer_due).otherwise(store_ms + F.element_at(levels, level))


def resolver_input(parked: DataFrame, settings: DelaySettings) -> DataFrame:
    """Pointers keyed by (bucket_ms, shard) from the source's rows."""
    width = settings.bucket_ms
    return (
        parked.select(
            F.col("commitlog_offset"),
            due_column(settings).alias("due_ms"),
            F.when(F.col("topic") == TIMER_TOPIC, F.lit(KIND_TIMER))
            .otherwise(F.lit(KIND_LEVEL))
            .alias("kind"),
            F.unix_millis(F.col("store_timestamp")).alias("enqueue_ms"),
            F.when(F.col("topic") == TIMER_TOPIC, F.lit(-1)).otherwise(F.col("queue_id")).alias("src_queue"),
            F.col("queue_offset").alias("src_queue_offset"),
            F.pmod(
                F.hash(F.col("properties")["REAL_TOPIC"], F.col("uniq_key")), F.lit(settings.shards)
            ).alias("shard"),
        )
        .where(F.col("due_ms").isNotNull())
        .withColumn("bucket_ms", F.ceil(F.col("due_ms") / F.lit(width)).cast("long") * F.lit(width))
    )


def resolve(parked: DataFrame, settings: DelaySettings) -> DataFrame:
    """The resolver's output (:data:`OUTPUT_SCHEMA`) for a stream of parked records."""
    return (
        resolver_input(parked, settings)
        .groupBy("bucket_ms", "shard")
        .transformWithState(
            statefulProcessor=DelayResolver(settings),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )
