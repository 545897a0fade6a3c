"""The columnar shape of stored messages, shared by every batch reader.

``MESSAGE_SCHEMA`` is exactly what ``pyspark.sql.pandas.types.to_arrow_schema`` produces for
the Spark source's documented schema (``streaming.reader.MESSAGE_DDL``), so the Spark source,
the HTTP Arrow pull and the Kafka gateway all consume the same ``pyarrow.RecordBatch``.
Every field is nullable, as Spark's are; map keys are not.
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("msg_id", pa.string()),
        pa.field("uniq_key", pa.string()),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.list_(pa.field("element", pa.string()))),
        pa.field("body", pa.binary()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("born_timestamp", TIMESTAMP),
        pa.field("store_timestamp", TIMESTAMP),
        pa.field("reconsume_times", pa.int32()),
    ]
)

#: A batch of no messages. (``pa.nulls``, not ``from_pylist([])``: pyarrow imports pandas,
#: 44 MB, to convert a Python list, and a process that only reads need not carry it.)
EMPTY_MESSAGE_BATCH = pa.RecordBatch.from_arrays(
    [pa.nulls(0, f.type) for f in MESSAGE_SCHEMA], schema=MESSAGE_SCHEMA
)

#: Properties surfaced as their own columns and therefore left out of ``properties``.
COLUMN_PROPERTIES = frozenset({"TAGS", "KEYS", "UNIQ_KEY"})
