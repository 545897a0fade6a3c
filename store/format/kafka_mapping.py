"""Kafka record <-> sparkmq message: how a Kafka key, value and headers live in a RocketMQ record.

One storage, three doors: the Kafka gateway (``ingest_api.kafka``), the Spark source with
``schema=kafka`` and the Spark sink's Kafka-shaped rows (``streaming``) all follow these rules,
so a record written through any door reads back the same through any other. The rules, once:

* **key** -> ``Message.keys`` (the ``KEYS`` property, space-separated, indexed). A UTF-8 key
  whose space-separated tokens are all non-empty is stored as those tokens, so ``KEYS`` equals
  the key and each token is indexed. Any other key (not UTF-8, empty, leading/trailing/double
  spaces, or holding a property separator) is kept exactly in ``KAFKA_KEY`` as
  ``"b64:" + base64(key)`` (the prefix keeps the value non-empty: the store drops empty
  property values); its non-empty UTF-8 tokens (if any) are still indexed. Read back:
  ``KAFKA_KEY`` if present, else ``KEYS`` as UTF-8, else a null key. So messages produced over
  HTTP with keys ``("a", "b")`` read as key ``b"a b"``.
* **headers** -> properties. A header is *plain* when its key is not a reserved property name
  and key and value are non-empty UTF-8 text without the RocketMQ property separators
  (0x01, 0x02); a plain header becomes property ``key=value``. When every header is plain and
  no key repeats, that is all. Otherwise the exact ordered list is also stored in
  ``KAFKA_HEADERS`` as compact JSON ``[[key, base64(value) | null], ...]`` (plain headers are
  still projected for readers of the other doors). Read back: ``KAFKA_HEADERS`` if present,
  else every non-reserved property in stored order, values UTF-8 encoded.
* **scheduling headers**: ``DELAY`` (a delay level, 0 = none) and the RocketMQ 5 timer
  properties ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_MS`` / ``TIMER_DELAY_SEC`` (decimal text) are
  not stored as headers: they schedule the record as the HTTP door's ``delay_level`` /
  ``deliver_at_ms`` / ``delay_ms`` do.
* **value** -> body; a null value (tombstone) is stored as an empty body plus
  ``KAFKA_NULL_VALUE=1``.
* **timestamp** (CreateTime) -> the born timestamp; Kafka readers see the born time with
  timestamp type 0 (CreateTime).

Pure functions on values; the vectorised forms for Arrow columns are in
:mod:`store.format.kafka_arrow` (the same results, under a differential test).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Final

from store.errors import InvalidArgument
from store.format.vocabulary import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_ID,
    SYSTEM_PROPERTIES,
    TIMER_REQUEST_PROPERTIES,
)

#: One Kafka header: a name and a value (``None`` for a null value).
KafkaHeader = tuple[str, bytes | None]

KEY_PROPERTY: Final = "KAFKA_KEY"
KEY_PREFIX: Final = "b64:"
HEADERS_PROPERTY: Final = "KAFKA_HEADERS"
NULL_VALUE_PROPERTY: Final = "KAFKA_NULL_VALUE"
#: The Kafka timestamp type sparkmq records carry: 0 = CreateTime (the born timestamp).
TIMESTAMP_TYPE_CREATE_TIME: Final = 0

#: RocketMQ's system properties plus the Kafka mapping's own; never Kafka headers.
RESERVED_PROPERTIES: Final = SYSTEM_PROPERTIES | {
    KEY_PROPERTY, HEADERS_PROPERTY, NULL_VALUE_PROPERTY, PROPERTY_TRANSACTION_ID,
}  # fmt: skip
#: The Kafka mapping's own properties: when a message has none of them, its key is its KEYS,
#: its value its body and its headers its non-reserved properties.
MAPPING_PROPERTIES: Final = frozenset({KEY_PROPERTY, HEADERS_PROPERTY, NULL_VALUE_PROPERTY})
SEPARATORS: Final = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)
#: Headers that schedule a record instead of travelling with it.
SCHEDULING_HEADERS: Final = frozenset({PROPERTY_DELAY, *TIMER_REQUEST_PROPERTIES})


def split_scheduling(headers: Iterable[KafkaHeader]) -> tuple[list[KafkaHeader], int, dict[str, str]]:
    """``(other headers, delay level, timer properties)`` of a record's headers.

    Raises :class:`InvalidArgument` for a scheduling header that is not a decimal integer or
    a negative delay level.
    """
    rest: list[KafkaHeader] = []
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


def has_scheduling(headers: Iterable[KafkaHeader]) -> bool:
    return any(name in SCHEDULING_HEADERS for name, _ in headers)


def plain_text(raw: bytes) -> str | None:
    """``raw`` as text when it is UTF-8 without a property separator, else ``None``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if any(sep in text for sep in SEPARATORS) else text


def key_to_store(key: bytes | None) -> tuple[tuple[str, ...], dict[str, str]]:
    """``(Message.keys, extra properties)`` for a Kafka key."""
    if key is None:
        return (), {}
    text = plain_text(key)
    if text is not None:
        tokens = tuple(text.split(" "))
        if text and all(tokens):
            return tokens, {}
        return tuple(t for t in tokens if t), {KEY_PROPERTY: encode_exact_key(key)}
    return (), {KEY_PROPERTY: encode_exact_key(key)}


def encode_exact_key(key: bytes) -> str:
    """The ``KAFKA_KEY`` value of a key kept exactly."""
    return KEY_PREFIX + base64.b64encode(key).decode("ascii")


def sharding_text(key: bytes) -> str:
    """The text a keyed record is routed by (``abs(javaHash(text)) % queues``, one key one
    queue): the key itself when it is UTF-8, else its ``KAFKA_KEY`` form."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return encode_exact_key(key)


def headers_to_properties(headers: Iterable[KafkaHeader]) -> dict[str, str]:
    """Properties for a Kafka header list (see the module docstring for the encoding)."""
    properties: dict[str, str] = {}
    exact_needed = False
    header_list = list(headers)
    for name, value in header_list:
        text = None if value is None else plain_text(value)
        plain = (
            bool(text)
            and name not in RESERVED_PROPERTIES
            and bool(name)
            and not any(sep in name for sep in SEPARATORS)
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


def stored_key(keys_joined: str | None, properties: Mapping[str, str]) -> bytes | None:
    """The Kafka key of a stored message (``keys_joined`` is the ``KEYS`` property)."""
    encoded = properties.get(KEY_PROPERTY)
    if encoded is not None and encoded.startswith(KEY_PREFIX):
        try:
            return base64.b64decode(encoded[len(KEY_PREFIX) :], validate=True)
        except binascii.Error:
            pass  # not ours: fall through to KEYS
    if keys_joined:
        return keys_joined.encode("utf-8")
    return None


def stored_value(body: bytes, properties: Mapping[str, str]) -> bytes | None:
    """The Kafka value of a stored message: ``None`` for a tombstone, else the body."""
    return None if properties.get(NULL_VALUE_PROPERTY) == "1" and not body else body


def stored_headers(properties: Mapping[str, str]) -> tuple[KafkaHeader, ...]:
    """The Kafka headers of a stored message."""
    exact = properties.get(HEADERS_PROPERTY)
    if exact is not None:
        decoded = _decode_exact_headers(exact)
        if decoded is not None:
            return decoded
    return tuple(
        (name, value.encode("utf-8")) for name, value in properties.items() if name not in RESERVED_PROPERTIES
    )


def _decode_exact_headers(encoded: str) -> tuple[KafkaHeader, ...] | None:
    try:
        items = json.loads(encoded)
        return tuple(
            (str(name), None if value is None else base64.b64decode(value, validate=True))
            for name, value in items
        )
    except (ValueError, TypeError, binascii.Error):
        return None  # written by someone else: fall back to the plain properties
