"""The delay resolver: delay levels and timer messages delivered by a ``transformWithState`` query.

Input: the parked records of ``SCHEDULE_TOPIC_XXXX`` (18 level queues) and ``rmq_sys_wheel_timer``
(queue 0), read by the ``sparkmq`` source with system topics enabled. State holds where the
parked records are, never a body copy (:mod:`streaming.operators.delay_state`):

* ``due_ms``: a level message is due at its store timestamp + the level's delay (RocketMQ's
  ConsumeQueue tagsCode, computed with the level table the resolver runs with); a timer message
  at ``TIMER_OUT_MS`` + precision (RocketMQ 5 rounds the requested time *up* to the next
  precision boundary, so delivery is never early).
* Key: ``(bucket_ms, shard)``: the due time rounded up to ``bucket_ms`` (100 ms), and for a level
  message its level queue modulo the shard count (a bucket of one level queue is then one run
  of queue offsets: one range), for a timer message a hash of (REAL_TOPIC, UNIQ_KEY) modulo the
  shard count, so a hot second spreads over partitions.
* Per key: a ``ListState`` of entries (ranges of level queues, packed timer pointers: one element
  per run or action time and batch), a ``ValueState`` summary, and one timer at the bucket's end
  (plus one per roll time): never a state element or a timer per message.
* On fire (processing time, ``timerValues`` only — never the wall clock, so a replayed batch
  computes the same output): every entry whose action time has come is emitted, at most
  ``burst_cap`` messages per key per batch (the rest re-arm the timer one millisecond later:
  catch-up after down-time is spread over batches). A range goes out as one row; a timer message
  as one row, a ROLL when its action came from the roll window (RocketMQ's roll).
* **Deciding ahead** (``lookahead_ms``, the broker's ``wheel_lookahead_ms``): a key's timer is
  armed that long before its bucket's end, and a fire emits everything due by ``now +
  lookahead_ms``; a DELIVER row's ``dequeue_ms`` is its due time (or ``now`` if that passed).
  The broker writes the rows due later as "due at T" records and its wheel (``broker/wheel.py``)
  delivers each at T, so the micro-batch's cost no longer adds to the lateness. The look-ahead
  is capped at the roll window; a rolled timer whose roll comes within the look-ahead of its due
  time is delivered at T by the wheel instead of re-parked (re-parking it would cost one more
  micro-batch of lateness), so such a timer may reach its topic with fewer rolls than without.
* Each touched key also emits summary rows (pending count, next action time, smallest queue
  offset per parked queue): the broker's ``GET /operators`` adds them up.

The output rows are relocation requests, published exactly once by the broker
(:mod:`store.publish.relocations`) through ``foreachBatch`` in :mod:`streaming.operators.runtime`.
"""

from __future__ import annotations

from collections.abc import Iterator
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
from streaming.operators.delay_state import (
    ENTRY_POINTERS,
    ENTRY_SCHEMA,
    KIND_LEVEL,
    KIND_TIMER,
    SUMMARY_SCHEMA,
    Entry,
    Pointers,
    Summary,
    entries_of,
    fire,
    merge_summaries,
    next_timer,
    pack_pointers,
    pack_summary,
    summarize,
    unpack_summary,
)

__all__ = ["KIND_LEVEL", "KIND_TIMER", "OUTPUT_SCHEMA", "DelayResolver", "DelaySettings", "resolve"]

RELOCATE_DELIVER, RELOCATE_ROLL = 0, 1
ROW_RELOCATION, ROW_SUMMARY = 0, 1

#: The state of an earlier version (a pointer per message), read once to carry it over.
LEGACY_PENDING_SCHEMA = StructType(
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
LEGACY_STATS_KEY_SCHEMA = StructType([StructField("queue", IntegerType())])
LEGACY_STATS_VALUE_SCHEMA = StructType(
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
        #: Range rows: SCHEDULE_TOPIC_XXXX queue ``queue_id``, ``count`` offsets from
        #: ``queue_offset`` (-1, -1, 1 for a single record at ``commitlog_offset``).
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("count", LongType()),
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
    #: Most messages one key emits per batch (the rest follow in the next batches).
    burst_cap: int = 100_000
    #: How far ahead a key fires (the broker's wheel delivers each message at its due time):
    #: 0 fires at the due time (a message waits for the batch after it); the broker says how
    #: far (``wheel_lookahead_ms`` of ``/operators/settings``). Never more than
    #: ``roll_window_ms`` (:attr:`ahead_ms`): the wheel holds no timer the roll window would roll.
    lookahead_ms: int = 0

    @property
    def ahead_ms(self) -> int:
        """The look-ahead in effect: ``lookahead_ms`` capped at ``roll_window_ms`` (ms)."""
        return max(0, min(self.lookahead_ms, self.roll_window_ms))


def _key(key: Any) -> tuple[int, int]:
    """(bucket_ms, shard) of a grouping key (``TwsTester`` wraps a tuple key once more)."""
    if len(key) == 1 and isinstance(key[0], tuple):
        key = key[0]
    return int(key[0]), int(key[1])


class DelayResolver(StatefulProcessor):
    """Keyed by (bucket_ms, shard); see the module docstring. Runs on PySpark's pandas API
    (``transformWithStateInPandas``): rows arrive and leave as DataFrames, and a key's state
    calls do not grow with its messages."""

    def __init__(self, settings: DelaySettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.entries = handle.getListState("entries", ENTRY_SCHEMA)
        self.summary = handle.getValueState("summary", SUMMARY_SCHEMA)
        # An earlier version's state, carried over when its key fires.
        self.legacy = handle.getListState("pending", LEGACY_PENDING_SCHEMA)
        self.legacy_stats = handle.getMapState("stats", LEGACY_STATS_KEY_SCHEMA, LEGACY_STATS_VALUE_SCHEMA)

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
        added = entries_of(
            _int64(frame, "kind"), _int64(frame, "due_ms"), _int64(frame, "commitlog_offset"),
            _int64(frame, "enqueue_ms"), _int64(frame, "src_queue"), _int64(frame, "src_queue_offset"),
            now_ms=now, roll_window_ms=self.settings.roll_window_ms,
        )  # fmt: skip
        self.entries.appendList([tuple(e) for e in added])  # type: ignore[arg-type]
        # One timer per key for deliveries (the bucket's end, never before a due time in it),
        # plus one at the roll time of pointers due past the roll window (their action time lies
        # before the bucket; one inside it is served by the bucket's timer): never one per message.
        bucket_end, shard = _key(key)
        rolls = {e.action_ms for e in added if e.action_ms <= bucket_end - self.settings.bucket_ms}
        for when in sorted({bucket_end - self.settings.ahead_ms, *rolls}):
            self.handle.registerTimer(int(when))
        old = self.summary.get() if self.summary.exists() else None
        merged = merge_summaries(unpack_summary(old[0] if old else None), summarize(added))
        self.summary.update((pack_summary(merged),))
        yield _summary_frame(bucket_end, shard, merged, gone=())

    def handleExpiredTimer(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803 (the keyword Spark passes)
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        entries = [Entry(*row) for row in self.entries.get()] if self.entries.exists() else []
        before = summarize(entries)
        if self.legacy.exists():
            entries += _carried_over(self.legacy.get())
            self.legacy.clear()
            self.legacy_stats.clear()
        # Everything due within the look-ahead is decided now: the broker's wheel delivers it
        # at its due time (``dequeue_ms``), never before.
        ahead = self.settings.ahead_ms
        horizon = now + ahead
        fired = fire(entries, horizon, self.settings.burst_cap)
        if not fired.ranges and not len(fired.pointers):
            return
        if fired.keep:
            self.entries.put([tuple(e) for e in fired.keep])  # type: ignore[arg-type]
            when = next_timer(fired.keep, horizon)
            if when is not None and when - ahead != expiredTimerInfo.getExpiryTimeInMs():
                self.handle.registerTimer(when - ahead)
        else:
            self.entries.clear()
        remaining = summarize(fired.keep)
        if remaining:
            self.summary.update((pack_summary(remaining),))
        else:
            self.summary.clear()
        bucket, shard = _key(key)
        yield _relocation_frame(bucket, shard, fired.ranges, fired.pointers, now, horizon)
        yield _summary_frame(bucket, shard, remaining, gone=sorted(set(before) - set(remaining)))

    def close(self) -> None:
        pass


def _int64(frame: pd.DataFrame, name: str) -> np.ndarray[Any, np.dtype[np.int64]]:
    values: np.ndarray[Any, np.dtype[np.int64]] = frame[name].to_numpy(dtype=np.int64)
    return values


def _carried_over(rows: Iterator[Any]) -> list[Entry]:
    """An earlier version's pointers (one list element per message) as packed entries."""
    legacy = np.asarray([tuple(int(v) for v in row) for row in rows], dtype=np.int64).reshape(-1, 7)
    out = []
    for action, queue in sorted({(int(a), int(q)) for a, q in legacy[:, [2, 5]].tolist()}):
        group = legacy[(legacy[:, 2] == action) & (legacy[:, 5] == queue)]
        group = group[np.lexsort((group[:, 0], group[:, 1]))]
        pointers = Pointers(group[:, 0], group[:, 4], group[:, 1])
        out.append(
            Entry(ENTRY_POINTERS, action, queue, int(group[:, 6].min()), len(group), pack_pointers(pointers))
        )
    return out


def _nulls(n: int, dtype: str) -> Any:
    return pd.array([None] * n, dtype=dtype)


def _relocation_frame(
    bucket: int,
    shard: int,
    ranges: list[tuple[int, int, int, int]],
    pointers: Pointers,
    now: int,
    horizon: int | None = None,
) -> pd.DataFrame:
    """Range rows, then pointer rows (DELIVER when due by ``horizon``, else ROLL). A DELIVER's
    ``dequeue_ms`` is when it may go: its due time, or ``now`` when that has passed (the broker
    holds one due later in its wheel until then)."""
    horizon = now if horizon is None else horizon
    r, p = len(ranges), len(pointers)
    n = r + p
    queue, first, count, action = (np.asarray([x[i] for x in ranges], dtype=np.int64) for i in range(4))
    due = np.concatenate((action, pointers.due_ms))
    deliver = due <= horizon
    return pd.DataFrame(
        {
            "row_type": np.full(n, ROW_RELOCATION, dtype=np.int32),
            "commitlog_offset": np.concatenate((np.full(r, -1, dtype=np.int64), pointers.commitlog_offsets)),
            "kind": np.where(deliver, RELOCATE_DELIVER, RELOCATE_ROLL).astype(np.int32),
            "enqueue_ms": np.concatenate((np.zeros(r, dtype=np.int64), pointers.enqueue_ms)),
            "dequeue_ms": np.where(deliver, np.maximum(due, now), now).astype(np.int64),
            "due_ms": due,
            "bucket_ms": np.full(n, bucket, dtype=np.int64),
            "shard": np.full(n, shard, dtype=np.int32),
            "pending": _nulls(n, "Int64"),
            "next_action_ms": _nulls(n, "Int64"),
            "src_queue": _nulls(n, "Int32"),
            "min_queue_offset": _nulls(n, "Int64"),
            "queue_id": np.concatenate((queue, np.full(p, -1, dtype=np.int64))).astype(np.int32),
            "queue_offset": np.concatenate((first, np.full(p, -1, dtype=np.int64))),
            "count": np.concatenate((count, np.ones(p, dtype=np.int64))),
        }
    )


def _summary_frame(bucket: int, shard: int, summary: Summary, gone: Any) -> pd.DataFrame:
    """Summary rows (queue, pending, next action, min queue offset) of one key; ``gone``
    queues report 0 pending."""
    rows = [(q, *summary[q]) for q in sorted(summary)] + [(q, 0, None, None) for q in gone]
    n = len(rows)
    return pd.DataFrame(
        {
            "row_type": np.full(n, ROW_SUMMARY, dtype=np.int32),
            "commitlog_offset": _nulls(n, "Int64"),
            "kind": _nulls(n, "Int32"),
            "enqueue_ms": _nulls(n, "Int64"),
            "dequeue_ms": _nulls(n, "Int64"),
            "due_ms": _nulls(n, "Int64"),
            "bucket_ms": np.full(n, bucket, dtype=np.int64),
            "shard": np.full(n, shard, dtype=np.int32),
            "pending": pd.array([r[1] for r in rows], dtype="Int64"),
            "next_action_ms": pd.array([r[2] for r in rows], dtype="Int64"),
            "src_queue": pd.array([r[0] for r in rows], dtype="Int32"),
            "min_queue_offset": pd.array([r[3] for r in rows], dtype="Int64"),
            "queue_id": _nulls(n, "Int32"),
            "queue_offset": _nulls(n, "Int64"),
            "count": _nulls(n, "Int64"),
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
            F.when(
                F.col("topic") == TIMER_TOPIC, F.hash(F.col("properties")["REAL_TOPIC"], F.col("uniq_key"))
            )
            .otherwise(F.col("queue_id"))
            .alias("shard_hash"),
        )
        .where(F.col("due_ms").isNotNull())
        .withColumn("bucket_ms", F.ceil(F.col("due_ms") / F.lit(width)).cast("long") * F.lit(width))
        .withColumn("shard", F.pmod(F.col("shard_hash"), F.lit(settings.shards)))
        .drop("shard_hash")
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
