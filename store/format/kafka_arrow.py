"""The Kafka mapping (:mod:`store.format.kafka_mapping`) on Arrow columns, both directions.

* :func:`kafka_view` — stored messages (``MESSAGE_SCHEMA`` columns) -> Kafka ``key``, ``value``
  and ``headers`` columns, as Spark's Kafka source types them: ``binary``, ``binary`` and
  ``list<struct<key: string, value: binary>>`` (a message without headers has null headers, as
  Spark's Kafka source gives). Used by the Spark source with ``schema=kafka``.
* :func:`kafka_to_message_columns` — Kafka ``key`` / ``value`` / ``headers`` columns -> what
  the store needs to write them: body, KEYS text, properties, delay level and the sharding key.
  Used by the Spark sink for Kafka-shaped rows.

Both take a vectorised path for the common rows (no ``KAFKA_*`` property on the way out; a
plain UTF-8 key and no headers on the way in) and apply the scalar rules of
:mod:`store.format.kafka_mapping` to the other rows, so the results equal the scalar rules row
by row (differential test: ``tests/store/test_kafka_arrow.py``).

Pure: Arrow arrays in, Arrow arrays out; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.errors import InvalidArgument
from store.format.arrow_ranges import is_utf8
from store.format.kafka_mapping import (
    HEADERS_PROPERTY,
    MAPPING_PROPERTIES,
    NULL_VALUE_PROPERTY,
    RESERVED_PROPERTIES,
    KafkaHeader,
    headers_to_properties,
    key_to_store,
    sharding_text,
    split_scheduling,
    stored_headers,
    stored_key,
    stored_value,
)

#: Spark's Kafka ``headers`` column as ``to_arrow_schema`` types it.
HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
_ENTRIES_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())])
)


@cache
def _names(names: frozenset[str]) -> pa.Array:
    """``names`` as an Arrow array, built on first use: ``pa.array`` of a Python list imports
    pandas when it is installed (pyarrow's array-like check), 44 MB that a process which never
    converts Kafka columns (the Spark source's runner) need not carry."""
    return pa.array(sorted(names), type=pa.string())


@dataclass(frozen=True, slots=True)
class KafkaView:
    """Kafka columns of a batch of stored messages (row for row)."""

    key: pa.Array
    value: pa.Array
    #: ``None`` unless asked for.
    headers: pa.Array | None


def kafka_view(keys: pa.Array, body: pa.Array, properties: pa.Array, *, with_headers: bool) -> KafkaView:
    """The Kafka ``key``, ``value`` (and ``headers``) of messages given their ``keys``
    (``list<string>``), ``body`` (``binary``) and ``properties`` (``map<string, string>``)."""
    entries = properties.cast(_ENTRIES_TYPE)
    names = pc.list_flatten(entries).field("key")
    owners = pc.list_parent_indices(entries)
    mapped = pc.is_in(names, value_set=_names(MAPPING_PROPERTIES))
    special = np.unique(owners.filter(mapped).to_numpy(zero_copy_only=False))
    key = _joined_keys(keys)
    value = body
    headers = _plain_headers(entries, names, owners) if with_headers else None
    if len(special):
        key, value, headers = _patch(special, keys, body, properties, key, value, headers)
    return KafkaView(key, value, headers)


def _joined_keys(keys: pa.Array) -> pa.Array:
    """``KEYS`` as the key: the tokens joined with spaces, null when there are none.

    Messages mostly have no key or one: then no join is needed, and the key column is built
    on the tokens' own buffers (65,536 one-key rows: ~0.7 ms for the whole view; the join alone
    took ~3.5 ms)."""
    n = len(keys)
    lengths = pc.list_value_length(keys)
    most = pc.max(lengths).as_py() if n else None
    if not most:
        return pa.nulls(n, pa.binary())
    present = pc.fill_null(pc.greater(lengths, 0), False)
    if most > 1:
        joined = pc.binary_join(keys, " ")
        return pc.if_else(present, joined, pa.scalar(None, pa.string())).cast(pa.binary())
    tokens = keys.values  # ignores the list's slice offset; ``keys.offsets`` index into it
    token_offsets = np.frombuffer(tokens.buffers()[1], dtype=np.int32)[
        tokens.offset : tokens.offset + len(tokens) + 1
    ]
    starts = token_offsets[keys.offsets.to_numpy()]  # row i spans [starts[i], starts[i + 1])
    validity = pa.array(present.to_numpy(zero_copy_only=False)).buffers()[1]
    return pa.Array.from_buffers(
        pa.binary(),
        n,
        [validity, pa.py_buffer(starts), tokens.buffers()[2]],
        null_count=n - present.true_count,
    )


def _plain_headers(entries: pa.Array, names: pa.Array, owners: pa.Array) -> pa.Array:
    """Every non-reserved property as a header, in stored order; null when a row has none."""
    n = len(entries)
    kept = pc.invert(pc.is_in(names, value_set=_names(RESERVED_PROPERTIES)))
    flat = pc.list_flatten(entries)
    kept_owners = owners.filter(kept).to_numpy(zero_copy_only=False)
    counts = np.bincount(kept_owners, minlength=n) if n else np.zeros(0, np.int64)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    values = pa.StructArray.from_arrays(
        [flat.field("key").filter(kept), flat.field("value").filter(kept).cast(pa.binary())],
        fields=list(HEADER_STRUCT),
    )
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=HEADERS_TYPE, mask=pa.array(counts == 0))


def _patch(
    rows: np.ndarray,
    keys: pa.Array,
    body: pa.Array,
    properties: pa.Array,
    key: pa.Array,
    value: pa.Array,
    headers: pa.Array | None,
) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """Rows carrying the mapping's own properties, by the scalar rules."""
    key_list, value_list = key.to_pylist(), value.to_pylist()
    header_list = headers.to_pylist() if headers is not None else None
    for i in rows.tolist():
        props = dict(properties[i].as_py() or ())
        tokens = keys[i].as_py()
        key_list[i] = stored_key(" ".join(tokens) if tokens else None, props)
        value_list[i] = stored_value(body[i].as_py() or b"", props)
        if header_list is not None and HEADERS_PROPERTY in props:
            found = stored_headers(props)
            header_list[i] = [{"key": k, "value": v} for k, v in found] or None
    return (
        pa.array(key_list, pa.binary()),
        pa.array(value_list, pa.binary()),
        None if header_list is None else pa.array(header_list, HEADERS_TYPE),
    )


# -- Kafka rows in ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """What the store writes for Kafka rows (row for row)."""

    body: pa.Array
    #: ``KEYS`` text (space-separated tokens) or null.
    keys: pa.Array
    #: ``map<string, string>`` or null per row.
    properties: pa.Array
    #: Delay level from a ``DELAY`` header (0 = none).
    delay_level: pa.Array
    #: The key as text (``KAFKA_KEY`` form when it is not plain UTF-8): rows with a key and no
    #: explicit queue go to ``abs(javaHash(key)) % queues``, so one key keeps one queue.
    sharding_key: pa.Array


def kafka_to_message_columns(
    key: pa.Array | None, value: pa.Array, headers: pa.Array | None
) -> MessageColumns:
    """Store columns for Kafka rows: ``key`` / ``value`` binary or string (either may be null),
    ``headers`` ``list<struct<key: string, value: binary | string>>`` (or absent).

    Raises :class:`store.InvalidArgument` for a scheduling header that is not a decimal integer
    or a header with a null key.
    """
    n = len(value)
    body = value.cast(pa.binary())
    tombstone = body.is_null()
    body = pc.fill_null(body, b"")
    key_text, plain = _key_text(key, n)
    with_headers = headers is not None and headers.null_count < n and _any_entries(headers)
    slow = np.flatnonzero(~plain)
    if with_headers or tombstone.true_count:
        slow = np.arange(n)
    keys_out = pc.if_else(plain, key_text, pa.scalar(None, pa.string())) if len(slow) < n else None
    if not len(slow):
        return MessageColumns(
            body, key_text, pa.nulls(n, PROPERTIES_TYPE), pa.array(np.zeros(n, np.int32)), key_text
        )
    return _rows_in(slow, key, body, tombstone, headers if with_headers else None, keys_out, key_text)


def _key_text(key: pa.Array | None, n: int) -> tuple[pa.Array, np.ndarray]:
    """``(key as text, which rows the fast path may keep)``: a null key, or a UTF-8 key without
    separators or empty tokens, is stored as its own text."""
    if key is None:
        return pa.nulls(n, pa.string()), np.ones(n, dtype=bool)
    if pa.types.is_binary(key.type) or pa.types.is_large_binary(key.type):
        as_text = key.cast(pa.string(), safe=False)
        if not is_utf8(as_text):
            return pa.nulls(n, pa.string()), key.is_null().to_numpy(zero_copy_only=False)
        key = as_text
    awkward = pc.or_(
        pc.or_(pc.match_substring(key, "\x01"), pc.match_substring(key, "\x02")),
        pc.or_(
            pc.or_(pc.equal(key, ""), pc.match_substring(key, "  ")),
            pc.or_(pc.starts_with(key, " "), pc.ends_with(key, " ")),
        ),
    )
    plain = pc.fill_null(pc.invert(awkward), True).to_numpy(zero_copy_only=False)
    return key.cast(pa.string()), plain


def _any_entries(headers: pa.Array) -> bool:
    offsets = headers.offsets
    return len(headers) > 0 and offsets[0].as_py() != offsets[len(offsets) - 1].as_py()


def _rows_in(
    rows: np.ndarray,
    key: pa.Array | None,
    body: pa.Array,
    tombstone: pa.Array,
    headers: pa.Array | None,
    keys_out: pa.Array | None,
    key_text: pa.Array,
) -> MessageColumns:
    """The scalar rules for ``rows`` (the rest keep their fast-path values)."""
    n = len(body)
    keys_list = keys_out.to_pylist() if keys_out is not None else [None] * n
    shard_list = key_text.to_pylist()
    props_list: list[list[tuple[str, str]] | None] = [None] * n
    levels = np.zeros(n, dtype=np.int32)
    null_value = tombstone.to_numpy(zero_copy_only=False)
    for i in rows.tolist():
        raw_key = _as_bytes(key[i].as_py()) if key is not None else None
        tokens, props = key_to_store(raw_key)
        keys_list[i] = " ".join(tokens) or None
        shard_list[i] = None if raw_key is None else sharding_text(raw_key)
        header_rows: list[KafkaHeader] = []
        if headers is not None:
            for h in headers[i].as_py() or ():
                if h["key"] is None:
                    raise InvalidArgument(f"a header of row {i} has a null key")
                header_rows.append((h["key"], _as_bytes(h["value"])))
        rest, levels[i], timer = split_scheduling(header_rows)
        props.update(headers_to_properties(rest))
        if null_value[i]:
            props[NULL_VALUE_PROPERTY] = "1"
        props.update(timer)
        props_list[i] = list(props.items()) or None
    return MessageColumns(
        body,
        pa.array(keys_list, pa.string()),
        pa.array(props_list, PROPERTIES_TYPE),
        pa.array(levels),
        pa.array(shard_list, pa.string()),
    )


def _as_bytes(raw: bytes | str | None) -> bytes | None:
    return raw.encode("utf-8") if isinstance(raw, str) else raw
