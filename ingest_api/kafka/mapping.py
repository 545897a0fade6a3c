"""Kafka record <-> sparkmq message: keys, headers and timestamps (one storage, three doors).

* **key** -> ``Message.keys`` (the ``KEYS`` property, space-separated, indexed). A UTF-8 key
  whose space-separated tokens are all non-empty is stored as those tokens, so ``KEYS`` equals
  the key and each token is indexed. Any other key (not UTF-8, empty, leading/trailing/double
  spaces) is kept exactly in ``KAFKA_KEY`` as ``"b64:" + base64(key)`` (the prefix keeps the
  value non-empty: the store drops empty property values); its non-empty UTF-8 tokens (if
  any) are still indexed. Fetch: ``KAFKA_KEY`` if present, else ``KEYS`` as UTF-8,
  else a null key. So messages produced over HTTP with keys ``("a", "b")`` read as key ``b"a b"``.
* **headers** -> properties. A header is *plain* when its key is not a reserved property name
  and key and value are non-empty UTF-8 text without the RocketMQ property separators
  (0x01, 0x02); a
  plain header becomes property ``key=value``. When every header is plain and no key repeats,
  that is all. Otherwise the exact ordered list is also stored in ``KAFKA_HEADERS`` as compact
  JSON ``[[key, base64(value) | null], ...]`` (plain headers are still projected for readers of
  the other doors). Fetch: ``KAFKA_HEADERS`` if present, else every non-reserved property in
  stored order, values UTF-8 encoded.
* **scheduling headers**: ``DELAY`` (a delay level, 0 = none) and the RocketMQ 5 timer
  properties ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC`` (decimal text) are
  not stored as headers: they schedule the record exactly as the HTTP door's ``delay_level`` /
  ``deliver_at_ms`` / ``delay_ms`` do (the store parks it; a bad value is ``INVALID_RECORD``).
* **value** -> body; a null value (tombstone) is stored as an empty body plus
  ``KAFKA_NULL_VALUE=1``.
* **timestamp** (CreateTime) -> ``born_timestamp_ms``; a record without one (-1) gets none and
  the store stamps the born time.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.kafka.records import Header, KafkaRecord
from store import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_ID,
    SYSTEM_PROPERTIES,
    TIMER_REQUEST_PROPERTIES,
    InvalidArgument,
    Message,
    ProduceColumns,
)

KEY_PROPERTY = "KAFKA_KEY"
_KEY_PREFIX = "b64:"
HEADERS_PROPERTY = "KAFKA_HEADERS"
NULL_VALUE_PROPERTY = "KAFKA_NULL_VALUE"

#: RocketMQ's system properties plus the gateway's own; never Kafka headers.
RESERVED_PROPERTIES = SYSTEM_PROPERTIES | {
    KEY_PROPERTY, HEADERS_PROPERTY, NULL_VALUE_PROPERTY, PROPERTY_TRANSACTION_ID,
}  # fmt: skip
#: Properties that never reach a Kafka record (the reserved ones minus the gateway's own).
_HIDDEN_PROPERTIES = pa.array(
    sorted(RESERVED_PROPERTIES - {KEY_PROPERTY, HEADERS_PROPERTY, NULL_VALUE_PROPERTY})
)
_SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
_NO_TIMESTAMP = -1
#: Headers that schedule a record instead of travelling with it.
SCHEDULING_HEADERS = frozenset({PROPERTY_DELAY, *TIMER_REQUEST_PROPERTIES})


def split_scheduling(headers: Iterable[Header]) -> tuple[list[Header], int, dict[str, str]]:
    """``(other headers, delay level, timer properties)`` of a record's headers."""
    rest: list[Header] = []
    level, timer = 0, {}
    for name, value in headers:
        if name not in SCHEDULING_HEADERS:
            rest.append((name, value))
            continue
        try:
            text = (value or b"").decode("ascii").strip()
        except UnicodeDecodeError:
            text = ""
        if not text.lstrip("+-").isdigit():
            raise InvalidArgument(f"header {name} must be a decimal integer, got {value!r}")
        if name == PROPERTY_DELAY:
            level = int(text)
            if level < 0:
                raise InvalidArgument(f"header DELAY must be >= 0 (0 = no delay), got {level}")
        else:
            timer[name] = text
    return rest, level, timer


def has_scheduling(headers: Iterable[Header]) -> bool:
    return any(name in SCHEDULING_HEADERS for name, _ in headers)


def _plain_text(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if any(sep in text for sep in _SEPARATORS) else text


def key_to_store(key: bytes | None) -> tuple[tuple[str, ...], dict[str, str]]:
    """``(Message.keys, extra properties)`` for a Kafka key."""
    if key is None:
        return (), {}
    text = _plain_text(key)
    if text is not None:
        tokens = tuple(text.split(" "))
        if text and all(tokens):
            return tokens, {}
        return tuple(t for t in tokens if t), {KEY_PROPERTY: _encode_exact_key(key)}
    return (), {KEY_PROPERTY: _encode_exact_key(key)}


def _encode_exact_key(key: bytes) -> str:
    return _KEY_PREFIX + base64.b64encode(key).decode("ascii")


def headers_to_properties(headers: Iterable[Header]) -> dict[str, str]:
    """Properties for a Kafka header list (see the module docstring for the encoding)."""
    properties: dict[str, str] = {}
    exact_needed = False
    header_list = list(headers)
    for name, value in header_list:
        text = None if value is None else _plain_text(value)
        plain = (
            bool(text)
            and name not in RESERVED_PROPERTIES
            and bool(name)
            and not any(sep in name for sep in _SEPARATORS)
        )
        if not plain or name in properties:
            exact_needed = True
            continue
        assert text is not None
        properties[name] = text
    if exact_needed:
        encoded = [
            [name, None if value is None else base64.b64encode(value).decode("ascii")]
            for name, value in header_list
        ]
        properties[HEADERS_PROPERTY] = json.dumps(encoded, separators=(",", ":"))
    return properties


def record_to_message(topic: str, partition: int, record: KafkaRecord) -> Message:
    """The store message for one produced Kafka record."""
    keys, properties = key_to_store(record.key)
    headers, level, timer = split_scheduling(record.headers)
    properties.update(headers_to_properties(headers))
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
    if any(has_scheduling(h) for h in headers if h):
        return None
    if any(k is not None for k in keys) or any(headers) or None in values:
        names = None
        for i in range(n):
            properties: dict[str, str] = {}
            key = keys[i]
            if key is not None:
                tokens, properties = key_to_store(key)
                store_keys[i] = " ".join(tokens) or None
            if headers[i]:
                properties.update(headers_to_properties(headers[i]))
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


def stored_key(keys_joined: str | None, properties: Mapping[str, str]) -> bytes | None:
    """The Kafka key of a stored message (``keys_joined`` is the ``KEYS`` property)."""
    encoded = properties.get(KEY_PROPERTY)
    if encoded is not None and encoded.startswith(_KEY_PREFIX):
        try:
            return base64.b64decode(encoded[len(_KEY_PREFIX) :], validate=True)
        except binascii.Error:
            pass  # not ours: fall through to KEYS
    if keys_joined:
        return keys_joined.encode("utf-8")
    return None


def stored_headers(properties: Mapping[str, str]) -> tuple[Header, ...]:
    """The Kafka headers of a stored message."""
    exact = properties.get(HEADERS_PROPERTY)
    if exact is not None:
        decoded = _decode_exact_headers(exact)
        if decoded is not None:
            return decoded
    return tuple(
        (name, value.encode("utf-8")) for name, value in properties.items() if name not in RESERVED_PROPERTIES
    )


def _decode_exact_headers(encoded: str) -> tuple[Header, ...] | None:
    try:
        items = json.loads(encoded)
        return tuple(
            (str(name), None if value is None else base64.b64decode(value, validate=True))
            for name, value in items
        )
    except (ValueError, TypeError, binascii.Error):
        return None  # written by someone else: fall back to the plain properties


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
    value = None if properties.get(NULL_VALUE_PROPERTY) == "1" and not body else body
    return KafkaRecord(timestamp_ms, stored_key(keys_joined, properties), value, stored_headers(properties))
