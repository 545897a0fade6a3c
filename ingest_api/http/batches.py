"""Decoding ``messages:batch`` request bodies: JSON, NDJSON and Arrow IPC streams.

Pure functions on bytes. Every refusal is an :class:`BrokerError` naming the offending entry's
``index``, raised before anything reaches the store, so a bad batch writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from broker.errors import BrokerError
from broker.produce import RESERVED_PROPERTIES, schedule_error
from ingest_api.http.schemas import ProduceBatchIn, ProduceEntryIn

JSON = "application/json"
NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"

#: Columns an Arrow batch may carry; ``body`` is required.
ARROW_COLUMNS = (
    "body", "tags", "keys", "properties", "queue_id", "sharding_key",
    "delay_level", "deliver_at_ms", "delay_ms",
)  # fmt: skip


def _too_many(count: int, limit: int) -> BrokerError:
    return BrokerError(
        413, "batch_too_large", f"batch has {count} messages; the limit is {limit}", limit=limit
    )


def _empty() -> BrokerError:
    return BrokerError(400, "empty_batch", "the batch has no messages")


def _invalid_entry(index: int, message: str) -> BrokerError:
    return BrokerError(422, "invalid_batch_entry", f"messages[{index}]: {message}", index=index)


def _from_validation_error(exc: ValidationError, index_offset: int = 0) -> BrokerError:
    first = exc.errors()[0]
    loc = list(first["loc"])
    if len(loc) >= 2 and loc[0] == "messages" and isinstance(loc[1], int):
        where = ".".join(str(part) for part in loc[2:])
        text = f"{where}: {first['msg']}" if where else str(first["msg"])
        return _invalid_entry(loc[1] + index_offset, text)
    if index_offset or not loc:
        where = ".".join(str(part) for part in loc)
        return _invalid_entry(index_offset, f"{where}: {first['msg']}" if where else str(first["msg"]))
    return BrokerError(422, "validation_error", f"{'.'.join(map(str, loc))}: {first['msg']}")


def parse_json_batch(raw: bytes, limit: int) -> list[ProduceEntryIn]:
    """``{"messages": [...]}`` -> validated entries (422 with the bad entry's index)."""
    try:
        batch = ProduceBatchIn.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "too_short" and list(first["loc"]) == ["messages"]:
            raise _empty() from None
        if first["type"] == "json_invalid":
            raise BrokerError(
                400, "invalid_json", f"request body is not valid JSON: {first['msg']}"
            ) from None
        raise _from_validation_error(exc) from None
    if len(batch.messages) > limit:
        raise _too_many(len(batch.messages), limit)
    if batch.transaction is not None:  # the batch's transaction: every entry joins it
        return [
            e if e.transaction is not None else e.model_copy(update={"transaction": batch.transaction})
            for e in batch.messages
        ]
    return batch.messages


def parse_ndjson_batch(raw: bytes, limit: int) -> list[ProduceEntryIn]:
    """One JSON message object per line; blank lines are skipped."""
    entries: list[ProduceEntryIn] = []
    for line in raw.split(b"\n"):
        if not line.strip():
            continue
        if len(entries) >= limit:
            raise _too_many(len(entries) + 1, limit)
        try:
            entries.append(ProduceEntryIn.model_validate_json(line))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise _invalid_entry(
                len(entries), f"{where}: {first['msg']}" if where else first["msg"]
            ) from None
    if not entries:
        raise _empty()
    return entries


@dataclass(frozen=True)
class ArrowBatch:
    """A validated Arrow produce batch, one row per message, columns normalised.

    ``body`` is ``binary``; optional columns are ``None`` when absent.
    """

    body: pa.BinaryArray
    tags: pa.StringArray | None
    keys: pa.ListArray | None
    properties: pa.MapArray | None
    queue_id: pa.Int32Array | None
    sharding_key: pa.StringArray | None
    delay_level: pa.Int32Array | None
    deliver_at_ms: pa.Int64Array | None = None
    delay_ms: pa.Int64Array | None = None

    def __len__(self) -> int:
        return len(self.body)


def _first_true(mask: pa.Array | pa.ChunkedArray) -> int | None:
    """Index of the first true value of a boolean array (nulls count as false)."""
    filled = pc.fill_null(mask, False)
    if not pc.any(filled).as_py():
        return None
    return int(pc.index(filled, True).as_py())


def _cast_column(table: pa.Table, name: str, target: pa.DataType) -> pa.Array | None:
    if name not in table.column_names:
        return None
    column = table.column(name).combine_chunks()
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise BrokerError(
            400,
            "invalid_arrow_batch",
            f"column {name!r} of type {column.type} cannot be read as {target}: {exc}",
        ) from None


def _check_text_column(column: pa.StringArray, name: str) -> None:
    bad = _first_true(pc.match_substring_regex(column, r"[\x01\x02]"))
    if bad is not None:
        raise _invalid_entry(bad, f"{name} must not contain the control characters \\x01 or \\x02")


def read_arrow_table(raw: bytes) -> pa.Table:
    try:
        with pa.ipc.open_stream(pa.BufferReader(raw)) as reader:
            return reader.read_all()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise BrokerError(400, "invalid_arrow_batch", f"body is not an Arrow IPC stream: {exc}") from None


def parse_arrow_batch(raw: bytes, limit: int) -> ArrowBatch:
    """An Arrow IPC stream with a ``body`` column (binary or string) and optional columns."""
    table = read_arrow_table(raw)
    unknown = sorted(set(table.column_names) - set(ARROW_COLUMNS))
    if unknown:
        raise BrokerError(
            400, "invalid_arrow_batch", f"unknown columns {unknown}; allowed: {list(ARROW_COLUMNS)}"
        )
    if table.num_rows == 0:
        raise _empty()
    if table.num_rows > limit:
        raise _too_many(table.num_rows, limit)
    if "body" not in table.column_names:
        raise BrokerError(400, "invalid_arrow_batch", "the batch has no 'body' column")
    body = _cast_column(table, "body", pa.binary())
    assert body is not None
    batch = ArrowBatch(
        body=body,
        tags=_cast_column(table, "tags", pa.string()),
        keys=_cast_column(table, "keys", pa.list_(pa.string())),
        properties=_cast_column(table, "properties", pa.map_(pa.string(), pa.string())),
        queue_id=_cast_column(table, "queue_id", pa.int32()),
        sharding_key=_cast_column(table, "sharding_key", pa.string()),
        delay_level=_cast_column(table, "delay_level", pa.int32()),
        deliver_at_ms=_cast_column(table, "deliver_at_ms", pa.int64()),
        delay_ms=_cast_column(table, "delay_ms", pa.int64()),
    )
    _validate_arrow_batch(batch)
    return batch


def _row_of_item(column: pa.MapArray, item_index: int) -> int:
    """Row holding the ``item_index``-th flattened map entry (``list_parent_indices`` aborts
    on map arrays in pyarrow 26, so the offsets are searched instead)."""
    offsets = column.offsets.to_numpy()
    return int(np.searchsorted(offsets, offsets[0] + item_index, side="right")) - 1


def _validate_arrow_batch(batch: ArrowBatch) -> None:
    bad = _first_true(pc.is_null(batch.body))
    if bad is not None:
        raise _invalid_entry(bad, "body is null")
    if batch.tags is not None:
        _check_text_column(batch.tags, "tags")
        bad = _first_true(
            pc.or_(
                pc.or_(pc.match_substring(batch.tags, "||"), pc.equal(pc.utf8_length(batch.tags), 0)),
                pc.not_equal(pc.utf8_trim_whitespace(batch.tags), batch.tags),
            )
        )
        if bad is not None:
            raise _invalid_entry(
                bad, "tags must be non-empty, must not contain '||' and must not start or end with whitespace"
            )
    if batch.keys is not None:
        flat = batch.keys.flatten()
        bad_flat = _first_true(
            pc.or_(pc.match_substring_regex(flat, r"[\s\x01\x02]"), pc.equal(pc.utf8_length(flat), 0))
        )
        if bad_flat is not None:
            row = pc.list_parent_indices(batch.keys)[bad_flat].as_py()
            raise _invalid_entry(row, "keys must be non-empty and contain no whitespace or \\x01/\\x02")
    if batch.properties is not None:
        names, values = batch.properties.keys, batch.properties.items
        reserved = pc.or_(
            pc.is_in(names, value_set=pa.array(sorted(RESERVED_PROPERTIES))),
            pc.equal(pc.utf8_length(names), 0),
        )
        for mask, what in (
            (reserved, "property names must be non-empty and not reserved for the broker"),
            (
                pc.match_substring_regex(names, r"[\x01\x02]"),
                "property names must not contain \\x01 or \\x02",
            ),
            (
                pc.fill_null(pc.match_substring_regex(values, r"[\x01\x02]"), False),
                "property values must not contain \\x01 or \\x02",
            ),
            (pc.is_null(values), "property values must not be null"),
        ):
            bad_item = _first_true(mask)
            if bad_item is not None:
                raise _invalid_entry(_row_of_item(batch.properties, bad_item), what)
    if batch.queue_id is not None:
        bad = _first_true(pc.less(batch.queue_id, 0))
        if bad is not None:
            raise _invalid_entry(bad, "queue_id must be >= 0")
        if batch.sharding_key is not None:
            bad = _first_true(pc.and_(pc.is_valid(batch.queue_id), pc.is_valid(batch.sharding_key)))
            if bad is not None:
                raise _invalid_entry(bad, "give at most one of 'queue_id' and 'sharding_key'")
    if batch.sharding_key is not None:
        bad = _first_true(pc.equal(pc.utf8_length(batch.sharding_key), 0))
        if bad is not None:
            raise _invalid_entry(bad, "sharding_key must not be empty")
    _validate_arrow_schedule(batch)


def _validate_arrow_schedule(batch: ArrowBatch) -> None:
    """The scheduling rules of :func:`broker.produce.scheduling`, vectorised (the
    maximum delay is checked when the rows are stored)."""
    columns = {
        name: column
        for name, column in (
            ("delay_level", batch.delay_level),
            ("deliver_at_ms", batch.deliver_at_ms),
            ("delay_ms", batch.delay_ms),
        )
        if column is not None and column.null_count < len(column)
    }
    if len(columns) > 1:
        given = pa.array(np.zeros(len(batch), dtype=np.int8))
        for column in columns.values():
            given = pc.add(given, pc.cast(pc.is_valid(column), pa.int8()))
        bad = _first_true(pc.greater(given, 1))
        if bad is not None:
            raise schedule_error(
                "give at most one of 'delay_level', 'deliver_at_ms' and 'delay_ms'", list(columns)[1], bad
            )
    for name, column in columns.items():
        bad = _first_true(pc.less(column, 0))
        if bad is not None:
            raise schedule_error(f"{name} must be >= 0, got {column[bad].as_py()}", name, bad)


def check_body_sizes(sizes: pa.Array, max_bytes: int) -> None:
    """413 naming the first entry whose body is larger than ``max_bytes``."""
    bad = _first_true(pc.greater(sizes, max_bytes))
    if bad is not None:
        raise BrokerError(
            413,
            "message_too_large",
            f"messages[{bad}]: body is larger than {max_bytes} bytes",
            index=bad,
        )
