"""The retry resolver: one retry per failed delivery attempt, however often it is sent back.

RocketMQ turns every send-back into a new retry message, so a retried request, a replayed
batch or two consumers racing multiply the copies (RocketMQ issues #1589, #1600). Here a
send-back is first a request record (``rmq_sys_sendback``, :mod:`store.write.sendback`) and this
``transformWithState`` query, keyed by (group, original message id), accepts the request of an
attempt only once: ``SENDBACK_ATTEMPT`` (the reconsume times of the message sent back) must be
above the last accepted attempt. Accepted requests go out as ``SENDBACK`` relocations, which
the broker publishes exactly once (:mod:`store.publish.relocations`) into the retry ladder
(``SCHEDULE_TOPIC_XXXX`` for ``%RETRY%group``) or the dead-letter queue.

State: one ``ValueState`` (the last accepted attempt) per key, with a processing-time TTL longer
than the whole ladder (4 h 46 min by default), so state does not grow without bound. No
timers: the delay resolver delivers the retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (Spark's idiom)
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle, TimerValues
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from streaming.operators.delay import OUTPUT_SCHEMA, ROW_RELOCATION

#: RelocationKind.SENDBACK (store.write.relocate).
RELOCATE_SENDBACK = 2
LAST_SCHEMA = StructType([StructField("attempt", IntegerType())])


@dataclass(frozen=True, slots=True)
class RetrySettings:
    #: How long a key's last attempt is remembered (longer than the ladder).
    ttl_ms: int = 6 * 3_600_000


def accepted(attempts: list[int], last: int | None) -> list[bool]:
    """Which of a key's requests (in log order) start a new attempt."""
    out = []
    for attempt in attempts:
        ok = last is None or attempt > last
        out.append(ok)
        if ok:
            last = attempt
    return out


class RetryResolver(StatefulProcessor):
    """Keyed by (group, origin); see the module docstring."""

    def __init__(self, settings: RetrySettings) -> None:
        self.settings = settings

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.last = handle.getValueState("last", LAST_SCHEMA, self.settings.ttl_ms)

    def handleInputRows(  # noqa: N802 (Spark's name)
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        frame = pd.concat(frames, ignore_index=True).sort_values("commitlog_offset")
        previous = self.last.get() if self.last.exists() else None
        last = int(previous[0]) if previous is not None else None
        keep = accepted([int(a) for a in frame["attempt"].tolist()], last)
        chosen = frame[np.asarray(keep, dtype=bool)]
        if not len(chosen):
            return
        self.last.update((int(chosen["attempt"].max()),))
        now = timerValues.getCurrentProcessingTimeInMs()
        n = len(chosen)
        yield pd.DataFrame(
            {
                "row_type": np.full(n, ROW_RELOCATION, dtype=np.int32),
                "commitlog_offset": chosen["commitlog_offset"].to_numpy(dtype=np.int64),
                "kind": np.full(n, RELOCATE_SENDBACK, dtype=np.int32),
                "enqueue_ms": np.zeros(n, dtype=np.int64),
                "dequeue_ms": np.full(n, now, dtype=np.int64),
                "due_ms": np.full(n, now, dtype=np.int64),
                "bucket_ms": np.zeros(n, dtype=np.int64),
                "shard": np.zeros(n, dtype=np.int32),
                "pending": pd.array([None] * n, dtype="Int64"),
                "next_action_ms": pd.array([None] * n, dtype="Int64"),
                "src_queue": pd.array([None] * n, dtype="Int32"),
                "min_queue_offset": pd.array([None] * n, dtype="Int64"),
                "queue_id": np.full(n, -1, dtype=np.int32),
                "queue_offset": np.full(n, -1, dtype=np.int64),
                "count": np.ones(n, dtype=np.int64),
            }
        )

    def close(self) -> None:
        pass


def resolve(rows: DataFrame, settings: RetrySettings) -> DataFrame:
    """Accepted send-back requests as relocation rows (the delay resolver's output schema)."""
    props = F.col("properties")
    keyed = rows.select(
        props["SENDBACK_GROUP"].alias("group"),
        props["SENDBACK_ORIGIN"].alias("origin"),
        props["SENDBACK_ATTEMPT"].cast("int").alias("attempt"),
        F.col("commitlog_offset").cast(LongType()),
    ).where(F.col("group").isNotNull() & F.col("origin").isNotNull() & F.col("attempt").isNotNull())
    return keyed.groupBy("group", "origin").transformWithStateInPandas(
        statefulProcessor=RetryResolver(settings),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="ProcessingTime",
    )
