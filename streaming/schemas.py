"""The rows of the ``sparkmq`` source: two shapes, chosen by the option ``schema``.

* ``rocketmq`` (the default): RocketMQ's message fields, :data:`MESSAGE_DDL`. Its
  ``to_arrow_schema`` is exactly ``store.MESSAGE_SCHEMA``, which the store, the HTTP Arrow pull
  and ``read()`` produce, so batches pass through unchanged.
* ``kafka``: exactly Spark's Kafka source columns and types (``KafkaRecordToRowConverter``),
  plus ``headers`` with ``includeHeaders=true``::

      key binary            the Kafka key: KAFKA_KEY if the record came through the Kafka door
                            with a key KEYS cannot hold, else the KEYS joined with spaces (one
                            key: that key), else null (store.format.kafka_mapping)
      value binary          the body (null for a Kafka tombstone)
      topic string
      partition int         the queue id
      offset bigint         the queue offset
      timestamp timestamp   the born time (the producer's; Kafka's CreateTime)
      timestampType int     0 (CreateTime)
      headers array<struct<key: string, value: binary>>
                            the user properties (Kafka headers as the Kafka door stores them),
                            null when there are none

  :func:`shape_batch` converts each batch on the executors, vectorised
  (``store.kafka_view``).

A user-supplied ``.schema(...)`` must equal the chosen one (:func:`check_schema`).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from store import KAFKA_HEADERS_TYPE, KAFKA_TIMESTAMP_TYPE_CREATE_TIME, kafka_view
from streaming.options import RowShape, SourceOptions

#: The default shape (``to_arrow_schema`` of it is ``store.MESSAGE_SCHEMA``).
MESSAGE_DDL = (
    "topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, msg_id STRING, "
    "uniq_key STRING, tags STRING, keys ARRAY<STRING>, body BINARY, properties MAP<STRING, STRING>, "
    "born_timestamp TIMESTAMP, store_timestamp TIMESTAMP, reconsume_times INT"
)

MESSAGE_STRUCT = StructType(
    [
        StructField("topic", StringType()),
        StructField("queue_id", IntegerType()),
        StructField("queue_offset", LongType()),
        StructField("commitlog_offset", LongType()),
        StructField("msg_id", StringType()),
        StructField("uniq_key", StringType()),
        StructField("tags", StringType()),
        StructField("keys", ArrayType(StringType())),
        StructField("body", BinaryType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("born_timestamp", TimestampType()),
        StructField("store_timestamp", TimestampType()),
        StructField("reconsume_times", IntegerType()),
    ]
)

#: ``schema=kafka`` without headers.
KAFKA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT"
)
#: ``schema=kafka`` with ``includeHeaders=true``.
KAFKA_HEADERS_DDL = KAFKA_DDL + ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"

_KAFKA_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS_FIELD = StructField(
    "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
)
_TIMESTAMP = pa.timestamp("us", tz="UTC")
KAFKA_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("timestampType", pa.int32()),
    ]
)
KAFKA_HEADERS_ARROW_SCHEMA = KAFKA_ARROW_SCHEMA.append(pa.field("headers", KAFKA_HEADERS_TYPE))


def kafka_struct(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``KafkaRecordToRowConverter.kafkaSchema``)."""
    return StructType(_KAFKA_FIELDS + ([_HEADERS_FIELD] if include_headers else []))


def struct_for(options: SourceOptions) -> StructType:
    if options.shape is RowShape.KAFKA:
        return kafka_struct(options.include_headers)
    return MESSAGE_STRUCT


def ddl_for(options: SourceOptions) -> str:
    if options.shape is RowShape.KAFKA:
        return KAFKA_HEADERS_DDL if options.include_headers else KAFKA_DDL
    return MESSAGE_DDL


def check_schema(schema: StructType, options: SourceOptions) -> None:
    """Refuse a user-supplied schema other than the one the options choose."""
    given = [(f.name, f.dataType) for f in schema.fields]
    expected = [(f.name, f.dataType) for f in struct_for(options).fields]
    if given != expected:
        raise ValueError(
            f"sparkmq has a fixed schema for schema={options.shape.value} ({ddl_for(options)}); "
            f"got {schema.simpleString()}"
        )


def shape_batch(batch: pa.RecordBatch, options: SourceOptions) -> pa.RecordBatch:
    """A ``MESSAGE_SCHEMA`` batch in the shape the options ask for."""
    if options.shape is RowShape.ROCKETMQ:
        return batch
    view = kafka_view(
        batch.column("keys"),
        batch.column("body"),
        batch.column("properties"),
        with_headers=options.include_headers,
    )
    columns = [
        view.key,
        view.value,
        batch.column("topic"),
        batch.column("queue_id"),
        batch.column("queue_offset"),
        batch.column("born_timestamp"),
        pa.array(np.full(batch.num_rows, KAFKA_TIMESTAMP_TYPE_CREATE_TIME, dtype=np.int32)),
    ]
    if view.headers is None:
        return pa.RecordBatch.from_arrays(columns, schema=KAFKA_ARROW_SCHEMA)
    return pa.RecordBatch.from_arrays([*columns, view.headers], schema=KAFKA_HEADERS_ARROW_SCHEMA)


def shape_batches(batches: Iterator[pa.RecordBatch], options: SourceOptions) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield shape_batch(batch, options)
