"""How a ``%RETRY%group`` record is shown to consumers: under its original topic.

RocketMQ's client resets the topic of a message read from ``%RETRY%group`` to its
``RETRY_TOPIC`` property; every sparkmq door that returns records (HTTP pull, the Spark source)
does the same, and the ``reconsume_times`` column tells the attempt.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def present_retry(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (MESSAGE_SCHEMA) with ``topic`` = ``RETRY_TOPIC`` where the record has one."""
    if batch.num_rows == 0:
        return batch
    original = pc.map_lookup(batch.column("properties"), "RETRY_TOPIC", "first")
    topic = pc.coalesce(original, batch.column("topic"))
    index = batch.schema.get_field_index("topic")
    return batch.set_column(index, batch.schema.field("topic"), topic)
