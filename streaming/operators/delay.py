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

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's idiom)
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from store import TIMER_TOPIC

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
    """Keyed by (bucket_ms, shard); see the module docstring. Runs on PySpark's pandas API
    (``transformWithStateInPandas``): rows arrive and leave as DataFrames, so the per-message
    Python work is a few NumPy operations, not a ``Row`` per message."""

    def __init__(self, settings: DelaySettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.pending = handle.getListState("pending", PENDING_SCHEMA)
        #: Per parked queue of this key: (count, next action ms, min queue offset), so input
        #: batches update the summary without reading the pointer list back.
        self.stats = handle.getMapState("stats", STATS_KEY_SCHEMA, STATS_VALUE_SCHEMA)

    def handleInputRows(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        due = frame["due_ms"].to_numpy(dtype=np.int64)
        kind = frame["kind"].to_numpy(dtype=np.int64)
        window = self.settings.roll_window_ms
        action = np.where((kind == KIND_TIMER) & (due - now > window), now + window, due)
        columns = [
            frame["commitlog_offset"].to_numpy(dtype=np.int64), due, action, kind,
            frame["enqueue_ms"].to_numpy(dtype=np.int64), frame["src_queue"].to_numpy(dtype=np.int64),
            frame["src_queue_offset"].to_numpy(dtype=np.int64),
        ]  # fmt: skip
        added: list[Pending] = list(zip(*(c.tolist() for c in columns), strict=True))
        self.pending.appendList(added)  # type: ignore[arg-type]
        # One timer per key for deliveries (the bucket's end, never before any due time in
        # it), plus one per distinct roll time: never a timer per message.
        bucket_end = int(key[0])
        for when in sorted({bucket_end, *np.unique(action[action != due]).tolist()}):
            self.handle.registerTimer(int(when))
        summaries = []
        for queue, new in sorted(_stats(added).items()):
            old = self.stats.getValue((queue,)) if self.stats.containsKey((queue,)) else None
            merged = new if old is None else (new[0] + old[0], min(new[1], old[1]), min(new[2], old[2]))
            self.stats.updateValue((queue,), merged)
            summaries.append((queue, *merged))
        yield _summary_frame(key, summaries)

    def handleExpiredTimer(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803 (the keyword Spark passes)
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        emit, keep = fire(self._pending(), now, self.settings.burst_cap)
        if not emit:
            return
        if keep:
            self.pending.put(keep)  # type: ignore[arg-type]
            when = next_timer(keep, now)
            if when is not None and when != expiredTimerInfo.getExpiryTimeInMs():
                self.handle.registerTimer(when)
        else:
            self.pending.clear()
        self.stats.clear()
        remaining = _stats(keep)
        for queue, value in remaining.items():
            self.stats.updateValue((queue,), value)
        out = np.asarray(emit, dtype=np.int64).reshape(len(emit), 7)
        due, kind = out[:, 1], out[:, 3]
        n = len(emit)
        yield pd.DataFrame(
            {
                "row_type": np.full(n, ROW_RELOCATION, dtype=np.int32),
                "commitlog_offset": out[:, 0],
                "kind": np.where(due <= now, RELOCATE_DELIVER, RELOCATE_ROLL).astype(np.int32),
                "enqueue_ms": np.where(kind == KIND_TIMER, out[:, 4], 0),
                "dequeue_ms": np.full(n, now, dtype=np.int64),
                "due_ms": due,
                "bucket_ms": np.full(n, int(key[0]), dtype=np.int64),
                "shard": np.full(n, int(key[1]), dtype=np.int32),
                "pending": pd.array([None] * n, dtype="Int64"),
                "next_action_ms": pd.array([None] * n, dtype="Int64"),
                "src_queue": pd.array([None] * n, dtype="Int32"),
                "min_queue_offset": pd.array([None] * n, dtype="Int64"),
            }
        )
        gone = {p[5] for p in emit} - set(remaining)
        yield _summary_frame(
            key, [(q, *remaining[q]) for q in sorted(remaining)] + [(q, 0, None, None) for q in sorted(gone)]
        )

    def _pending(self) -> Iterator[Pending]:
        if not self.pending.exists():
            return iter(())
        return (tuple(int(v) for v in p) for p in self.pending.get())  # type: ignore[misc]

    def close(self) -> None:
        pass


def _summary_frame(key: Any, rows: list[tuple[int, int, int | None, int | None]]) -> pd.DataFrame:
    """Summary rows (queue, pending, next action, min queue offset) of one key."""
    n = len(rows)
    return pd.DataFrame(
        {
            "row_type": np.full(n, ROW_SUMMARY, dtype=np.int32),
            "commitlog_offset": pd.array([None] * n, dtype="Int64"),
            "kind": pd.array([None] * n, dtype="Int32"),
            "enqueue_ms": pd.array([None] * n, dtype="Int64"),
            "dequeue_ms": pd.array([None] * n, dtype="Int64"),
            "due_ms": pd.array([None] * n, dtype="Int64"),
            "bucket_ms": np.full(n, int(key[0]), dtype=np.int64),
            "shard": np.full(n, int(key[1]), dtype=np.int32),
            "pending": pd.array([r[1] for r in rows], dtype="Int64"),
            "next_action_ms": pd.array([r[2] for r in rows], dtype="Int64"),
            "src_queue": pd.array([r[0] for r in rows], dtype="Int32"),
            "min_queue_offset": pd.array([r[3] for r in rows], dtype="Int64"),
        }
    )


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
        .transformWithStateInPandas(
            statefulProcessor=DelayResolver(settings),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )
