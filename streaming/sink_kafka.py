"""Kafka-shaped rows for the ``sparkmq`` sink: the columns Spark's Kafka sink takes.

A DataFrame written with ``format("kafka")`` has these columns (all but ``value`` optional)::

    key        binary | string      the record key (null: none)
    value      binary | string      the record value (null: a tombstone)
    headers    array<struct<key: string, value: binary | string>>
    topic      string               per-row topic; the option ``topic`` overrides it (as Kafka's)
    partition  tinyint..bigint      the queue; null or absent: by the key, else round robin

They are stored as the Kafka door stores a produced record (``store.format.kafka_mapping``),
so the Kafka gateway, ``schema=kafka`` reads and ``format("kafka")``-style jobs agree on every
key, value and header: the key becomes ``KEYS`` (or ``KAFKA_KEY`` when KEYS cannot hold it),
headers become properties, ``DELAY`` / ``TIMER_*`` headers schedule the message. A row with a
key and no partition goes to the queue its key hashes to (``abs(javaHash(key)) % queues``,
sparkmq's sharding rule), so one key keeps one queue as with Kafka's default partitioner.

A DataFrame has one shape: Kafka-shaped columns beside RocketMQ-shaped ones (``body``, ``tags``,
``keys``, ...) fail the query at start, naming them (:func:`row_shape`).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from store import InvalidArgument, kafka_to_message_columns
from store.publish import PART_SCHEMA

_INTEGERS = ("tinyint", "smallint", "int", "bigint")
#: Kafka-shaped columns and the Spark types accepted for each.
KAFKA_ACCEPTED: Mapping[str, tuple[str, ...]] = {
    "key": ("binary", "string"),
    "value": ("binary", "string"),
    "headers": ("array<struct<key:string,value:binary>>", "array<struct<key:string,value:string>>"),
    "topic": ("string",),
    "partition": _INTEGERS,
}
#: Columns only the Kafka shape has (``topic`` belongs to both).
KAFKA_ONLY = frozenset(KAFKA_ACCEPTED) - {"topic"}

ROCKETMQ = "rocketmq"
KAFKA = "kafka"


class ShapeError(InvalidArgument):
    """The DataFrame's columns do not make one shape (``column`` names the first culprit)."""

    def __init__(self, column: str, problem: str) -> None:
        super().__init__(problem)
        self.column = column


def row_shape(columns: Mapping[str, str], rocketmq_only: frozenset[str]) -> str:
    """``"kafka"`` or ``"rocketmq"`` for a DataFrame with ``columns`` (name -> Spark type);
    raises :class:`ShapeError` for a mix of the two shapes or a Kafka shape without ``value``."""
    kafka = sorted(KAFKA_ONLY & set(columns))
    rocketmq = sorted(rocketmq_only & set(columns))
    if kafka and rocketmq:
        raise ShapeError(
            rocketmq[0],
            f"mixes Kafka-shaped columns ({', '.join(kafka)}) with RocketMQ-shaped columns "
            f"({', '.join(rocketmq)}): write one shape (key/value/headers/partition, or "
            "body/tags/keys/properties/queue_id/...)",
        )
    if not kafka:
        return ROCKETMQ
    if "value" not in columns:
        raise ShapeError("value", f"is required in Kafka-shaped rows; the DataFrame has {sorted(columns)}")
    return KAFKA


def kafka_part_batch(batch: pa.RecordBatch, topic_option: str | None) -> pa.RecordBatch:
    """One Kafka-shaped input batch as a :data:`PART_SCHEMA` batch.

    Raises :class:`ShapeError` for a row without a topic or with a bad scheduling header."""
    n = batch.num_rows
    names = set(batch.schema.names)

    def column(name: str) -> pa.Array | None:
        return batch.column(name) if name in names else None

    try:
        stored = kafka_to_message_columns(column("key"), batch.column("value"), column("headers"))
    except InvalidArgument as exc:
        raise ShapeError("headers", str(exc)) from None
    partition = column("partition")
    return pa.RecordBatch.from_arrays(
        [
            _topics(column("topic"), topic_option, n),
            stored.body,
            pa.nulls(n, pa.string()),
            stored.keys,
            stored.properties,
            pa.nulls(n, pa.int32()) if partition is None else partition.cast(pa.int32()),
            stored.sharding_key,
            stored.delay_level,
        ],
        schema=PART_SCHEMA,
    )


def _topics(topic: pa.Array | None, option: str | None, n: int) -> pa.Array:
    """The option wins over the column (Spark's Kafka sink); else the column, never null."""
    if option is not None:
        return pa.array([option] * n, pa.string()) if n else pa.array([], pa.string())
    if topic is None:
        raise ShapeError("topic", "is required (a column, or the option 'topic')")
    if topic.null_count:
        raise ShapeError("topic", f"is null in {topic.null_count} row(s) and no 'topic' option is set")
    return topic.cast(pa.string())
