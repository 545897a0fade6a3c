"""The transaction resolver: when to check back on a transaction, and when to give up on it.

Replaces RocketMQ's ``TransactionalMessageCheckService``, not ``EndTransactionProcessor``: the
broker alone writes final messages (an atomic, idempotent end, :mod:`store.publish.transactions`);
this ``transformWithState`` query only decides, from the log, which transactions are overdue.

* **Input**: the half messages (``RMQ_SYS_TRANS_HALF_TOPIC``) and op records
  (``RMQ_SYS_TRANS_OP_HALF_TOPIC``) read with the ``sparkmq`` source, keyed by transaction id
  (``__transactionId__``: the half's UNIQ_KEY, shared by the halves of a multi-message
  transaction; the broker's op records carry it too).
* **State per transaction** (``ValueState``): status (prepared / ended), born time, producer
  group, topic, UNIQ_KEY, the first half's CommitLog offset, and the number of checks sent.
  An op read before its half (queues are sampled one after another) leaves an *ended*
  tombstone, so the late half is ignored; tombstones are cleared by a timer.
* **One processing-time timer per prepared transaction**: the first check at
  ``born + max(immunity, CHECK_IMMUNITY_TIME_IN_SECONDS)``, then every check interval. On fire:
  after ``check_max`` checks, or once the half is older than the CommitLog retention, emit
  ``DISCARD`` (the broker moves the half to ``TRANS_CHECK_MAX_TIME_TOPIC``, as RocketMQ does);
  otherwise emit ``CHECK`` and count it.
* Processors read only ``timerValues`` (never the wall clock, never the network): a replayed
  batch decides the same. The producer's answer is not an input here: the broker asks the
  producer outside Spark and ends the transaction itself, so a slow producer never stalls a batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's idiom)
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from store import TRANS_OP_HALF_TOPIC

KIND_HALF, KIND_OP = 0, 1
STATUS_PREPARED, STATUS_ENDED = 0, 1
ACTION_CHECK, ACTION_DISCARD = 0, 1

STATE_SCHEMA = StructType(
    [
        StructField("status", IntegerType()),
        StructField("born_ms", LongType()),
        StructField("producer_group", StringType()),
        StructField("topic", StringType()),
        StructField("uniq_key", StringType()),
        StructField("commitlog_offset", LongType()),
        StructField("check_times", IntegerType()),
        StructField("next_ms", LongType()),
    ]
)

OUTPUT_SCHEMA = StructType(
    [
        StructField("action", IntegerType()),
        StructField("transaction_id", StringType()),
        StructField("producer_group", StringType()),
        StructField("topic", StringType()),
        StructField("uniq_key", StringType()),
        StructField("commitlog_offset", LongType()),
        StructField("check_times", IntegerType()),
        StructField("born_ms", LongType()),
        StructField("decided_ms", LongType()),
    ]
)


@dataclass(frozen=True, slots=True)
class TransactionSettings:
    """RocketMQ's ``transactionTimeOut``, ``transactionCheckInterval``, ``transactionCheckMax``
    and ``fileReservedTime``; all in ms."""

    immunity_ms: int = 6000
    check_interval_ms: int = 30_000
    check_max: int = 15
    reserved_ms: int = 72 * 3_600_000
    #: How long an ended transaction's tombstone waits for a late half.
    tombstone_ms: int = 600_000


def first_check_ms(born_ms: int, immunity_ms: int, message_immunity_s: int | None) -> int:
    """RocketMQ: no check before ``transactionTimeOut`` (or the message's own immunity)."""
    wait = max(immunity_ms, (message_immunity_s or 0) * 1000)
    return born_ms + wait


def on_fire(
    state: tuple[Any, ...], now_ms: int, settings: TransactionSettings
) -> tuple[int | None, tuple[Any, ...] | None, int | None]:
    """``(action or None, new state or None to clear, next timer or None)`` for a fired timer."""
    status, born, group, topic, uniq, offset, checks, _ = state
    if status == STATUS_ENDED:
        return None, None, None  # a tombstone's cleanup
    if checks >= settings.check_max or now_ms - born > settings.reserved_ms:
        ended = (STATUS_ENDED, born, group, topic, uniq, offset, checks, now_ms + settings.tombstone_ms)
        return ACTION_DISCARD, ended, now_ms + settings.tombstone_ms
    nxt = now_ms + settings.check_interval_ms
    return ACTION_CHECK, (status, born, group, topic, uniq, offset, checks + 1, nxt), nxt


#: (born_ms, producer group, topic, uniq key, first half's CommitLog offset, own immunity s)
HalfInfo = tuple[int, str, str, str, int, int | None]


def on_input(
    current: tuple[Any, ...] | None,
    *,
    has_op: bool,
    first_half: HalfInfo | None,
    now_ms: int,
    settings: TransactionSettings,
) -> tuple[tuple[Any, ...] | None, int | None]:
    """``(new state or None for unchanged, timer)`` for a batch of a transaction's rows.

    An op ends the transaction (an *ended* tombstone with a cleanup timer), also when it is
    read before its half; a half of an ended transaction changes nothing; the first half of a
    new transaction makes it prepared, with its first check after the immunity."""
    if has_op:
        kept = current if current is not None else (None,) * len(STATE_SCHEMA.fields)
        born = kept[1] if kept[1] is not None else 0
        tombstone = now_ms + settings.tombstone_ms
        return (STATUS_ENDED, born, *kept[2:7], tombstone), tombstone
    if current is not None or first_half is None:
        return None, None
    born, group, topic, uniq, offset, own = first_half
    when = first_check_ms(born, settings.immunity_ms, own)
    return (STATUS_PREPARED, born, group, topic, uniq, offset, 0, when), when


class TransactionResolver(StatefulProcessor):
    """Keyed by transaction id; see the module docstring."""

    def __init__(self, settings: TransactionSettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("tx", STATE_SCHEMA)

    def _replace_timer(self, when: int | None) -> None:
        for old in self.handle.listTimers():
            self.handle.deleteTimer(old)
        if when is not None:
            self.handle.registerTimer(int(when))

    def handleInputRows(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        now = timerValues.getCurrentProcessingTimeInMs()
        frames = [f for f in rows if len(f)]
        if not frames:
            return iter(())
        frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        current = tuple(self.state.get() or ()) if self.state.exists() else None
        halves = frame[frame["kind"] == KIND_HALF].sort_values("commitlog_offset")
        first = halves.iloc[0] if len(halves) else None
        immunity = halves["immunity_s"].dropna()
        new_state, timer = on_input(
            current,
            has_op=bool((frame["kind"] == KIND_OP).any()),
            first_half=None if first is None else (
                int(halves["born_ms"].min()), str(first["producer_group"] or ""), str(first["topic"] or ""),
                str(first["uniq_key"] or ""), int(first["commitlog_offset"]),
                int(immunity.max()) if len(immunity) else None,
            ),
            now_ms=now,
            settings=self.settings,
        )  # fmt: skip
        if new_state is not None:
            self.state.update(new_state)
            if current is None:  # a new key has no timer to replace: one state call less
                if timer is not None:
                    self.handle.registerTimer(int(timer))
            else:
                self._replace_timer(timer)
        return iter(())

    def handleExpiredTimer(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        timerValues: TimerValues,  # noqa: N803
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        if not self.state.exists():
            return
        now = timerValues.getCurrentProcessingTimeInMs()
        state = tuple(self.state.get() or ())
        action, new_state, timer = on_fire(state, now, self.settings)
        if new_state is None:
            self.state.clear()
        else:
            self.state.update(new_state)
        if timer is not None:
            self.handle.registerTimer(int(timer))
        if action is None:
            return
        after = new_state if new_state is not None else state
        yield pd.DataFrame(
            {
                "action": np.array([action], dtype=np.int32),
                "transaction_id": [str(key[0])],
                "producer_group": [after[2]],
                "topic": [after[3]],
                "uniq_key": [after[4]],
                "commitlog_offset": np.array([after[5]], dtype=np.int64),
                "check_times": np.array([after[6]], dtype=np.int32),
                "born_ms": np.array([after[1]], dtype=np.int64),
                "decided_ms": np.array([now], dtype=np.int64),
            }
        )

    def close(self) -> None:
        pass


def resolver_input(rows: DataFrame) -> DataFrame:
    """Half and op rows keyed by transaction id."""
    props = F.col("properties")
    is_op = F.col("topic") == TRANS_OP_HALF_TOPIC
    return rows.select(
        F.coalesce(props["__transactionId__"], F.col("uniq_key")).alias("transaction_id"),
        F.when(is_op, F.lit(KIND_OP)).otherwise(F.lit(KIND_HALF)).alias("kind"),
        F.unix_millis(F.col("born_timestamp")).alias("born_ms"),
        props["PGROUP"].alias("producer_group"),
        props["REAL_TOPIC"].alias("topic"),
        F.col("uniq_key"),
        F.col("commitlog_offset"),
        props["CHECK_IMMUNITY_TIME_IN_SECONDS"].cast("long").alias("immunity_s"),
    ).where(F.col("transaction_id").isNotNull())


def resolve(rows: DataFrame, settings: TransactionSettings) -> DataFrame:
    """The resolver's output (:data:`OUTPUT_SCHEMA`): CHECK and DISCARD decisions."""
    return (
        resolver_input(rows)
        .groupBy("transaction_id")
        .transformWithStateInPandas(
            statefulProcessor=TransactionResolver(settings),
            outputStructType=OUTPUT_SCHEMA,
            outputMode="Append",
            timeMode="ProcessingTime",
        )
    )
