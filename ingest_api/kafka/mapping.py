"""Kafka record <-> sparkmq message for the gateway: records and columns of records.

The rules (key, headers, scheduling headers, tombstones, timestamps) have one home,
:mod:`store.format.kafka_mapping` (``store``'s ``kafka_*`` names), shared with the Spark
source and sink; this module applies them to the gateway's :class:`KafkaRecord`s and to the
columnar produce path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.kafka.records import Header, KafkaRecord
from store import KAFKA_HEADERS_PROPERTY as HEADERS_PROPERTY
from store import KAFKA_KEY_PROPERTY as KEY_PROPERTY
from store import KAFKA_NULL_VALUE_PROPERTY as NULL_VALUE_PROPERTY
from store import KAFKA_RESERVED_PROPERTIES as RESERVED_PROPERTIES
from store import (
    Message,
    ProduceColumns,
    kafka_has_scheduling,
    kafka_headers_to_properties,
    kafka_key_to_store,
    kafka_split_scheduling,
    stored_kafka_headers,
    stored_kafka_key,
    stored_kafka_value,
)

__all__ = [
    "HEADERS_PROPERTY",
    "KEY_PROPERTY",
    "NULL_VALUE_PROPERTY",
    "RESERVED_PROPERTIES",
    "batch_to_columns",
    "only_hidden_properties",
    "record_to_message",
    "records_to_columns",
    "stored_record",
]

#: Properties that never reach a Kafka record (the reserved ones minus the mapping's own).
_HIDDEN_PROPERTIES = pa.array(
    sorted(RESERVED_PROPERTIES - {KEY_PROPERTY, HEADERS_PROPERTY, NULL_VALUE_PROPERTY})
)


def record_to_message(topic: str, partition: int, record: KafkaRecord) -> Message:
    """The store message for one produced Kafka record."""
    keys, properties = kafka_key_to_store(record.key)
    headers, level, timer = kafka_split_scheduling(record.headers)
    properties.update(kafka_headers_to_properties(headers))
    if record.value is None:
        properties[NULL_VALUE_PROPERTY] = "1"
    properties.update(timer)
    born = record.timestamp_ms if record.timestamp_ms >= 0 else None
    return Message(
        topic=topic,
        body=record.value or b"",
        keys=keys,
        properties=properties,
        queue_id=partition,
        born_timestamp_ms=born,
        delay_level=level,
    )


def records_to_columns(records: Sequence[KafkaRecord], partition: int, now_ms: int) -> ProduceColumns | None:
    """The store's columns for ``records`` of one partition (same mapping as
    :func:`record_to_message`), for ``MessageStore.put_columns``.

    Returns ``None`` when records carry differently ordered property names (the columnar put
    would store them in column order and headers must come back in the producer's order) or
    scheduling headers (the store parks those one by one), so the caller falls back to one
    ``Message`` per record.
    """
    return batch_to_columns(
        partition,
        [r.timestamp_ms for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
        now_ms,
    )


def batch_to_columns(
    partition: int,
    timestamps_ms: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[tuple[Header, ...]],
    now_ms: int,
) -> ProduceColumns | None:
    """:func:`records_to_columns` for records already held as columns."""
    n = len(values)
    store_keys: list[str | None] = [None] * n
    columns: dict[str, list[str | None]] = {}
    names: tuple[str, ...] | None = ()
    if any(kafka_has_scheduling(h) for h in headers if h):
        return None
    if any(k is not None for k in keys) or any(headers) or None in values:
        names = None
        for i in range(n):
            properties: dict[str, str] = {}
            key = keys[i]
            if key is not None:
                tokens, properties = kafka_key_to_store(key)
                store_keys[i] = " ".join(tokens) or None
            if headers[i]:
                properties.update(kafka_headers_to_properties(headers[i]))
            if values[i] is None:
                properties[NULL_VALUE_PROPERTY] = "1"
            if names is None:
                names = tuple(properties)
                columns = {name: [None] * n for name in names}
            elif tuple(properties) != names:
                return None
            for name, value in properties.items():
                columns[name][i] = value
    return ProduceColumns(
        bodies=[v or b"" for v in values],
        queue_ids=np.full(n, partition, dtype=np.int32),
        keys=store_keys if any(k is not None for k in store_keys) else None,
        properties=columns,
        born_timestamps_ms=[t if t >= 0 else now_ms for t in timestamps_ms],
    )


def only_hidden_properties(properties: pa.MapArray) -> bool:
    """True when no message of a ``MESSAGE_SCHEMA`` properties column has a property that shapes
    its Kafka record (key, value, headers): none at all, or only hidden system ones, such as
    the ``REAL_TOPIC`` / ``TRAN_MSG`` / ``PGROUP`` a committed transaction's messages keep."""
    offsets = properties.offsets
    first, last = offsets[0].as_py(), offsets[len(offsets) - 1].as_py()
    names = properties.keys.slice(first, last - first)  # ``keys`` ignores the slice's offset
    return len(names) == 0 or bool(pc.all(pc.is_in(names, value_set=_HIDDEN_PROPERTIES)).as_py())


def stored_record(
    timestamp_ms: int, body: bytes, keys_joined: str | None, properties: Mapping[str, str]
) -> KafkaRecord:
    """The Kafka record for a stored message."""
    return KafkaRecord(
        timestamp_ms,
        stored_kafka_key(keys_joined, properties),
        stored_kafka_value(body, properties),
        stored_kafka_headers(properties),
    )
