"""Rendering results without a model object per message: JSON text and Arrow IPC streams.

Pure functions. The JSON they produce is exactly what the matching ``schemas`` models would
(tested), so the OpenAPI spec stays the contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.http.schemas import body_fields
from store import MESSAGE_SCHEMA, BatchPutResult, PutResult, ascii_rows, ascii_rows_array, msg_id_chars

#: Columns of the Arrow answer to a batch produce (``Accept: application/vnd.apache.arrow.stream``).
PRODUCE_RESULT_SCHEMA = pa.schema(
    [
        pa.field("msg_id", pa.string()),
        pa.field("uniq_key", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("queue_id", pa.int32()),
        pa.field("queue_offset", pa.int64()),
        pa.field("commitlog_offset", pa.int64()),
        pa.field("store_timestamp", pa.int64()),
    ]
)


def stream_bytes(batch: pa.RecordBatch, schema: pa.Schema) -> memoryview:
    """One record batch as an Arrow IPC stream (schema, batch, end-of-stream), uncopied."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        if batch.num_rows:
            writer.write_batch(batch)
    return memoryview(sink.getvalue())


def message_stream(batch: pa.RecordBatch) -> memoryview:
    """Pulled messages (``MESSAGE_SCHEMA``) as an Arrow IPC stream."""
    return stream_bytes(batch, MESSAGE_SCHEMA)


def _msg_ids(outcome: BatchPutResult) -> list[str]:
    return ascii_rows(msg_id_chars(outcome.store_host, outcome.commitlog_offsets))


def _msg_id_array(outcome: BatchPutResult) -> pa.StringArray:
    """:func:`_msg_ids` as an Arrow string column, without a Python string per message."""
    return ascii_rows_array(msg_id_chars(outcome.store_host, outcome.commitlog_offsets))


class _ResultRow(msgspec.Struct, gc=False, omit_defaults=True):
    """:class:`ProduceOut`'s fields, in its order, for msgspec's encoder (``broker`` in a
    cluster only)."""

    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int
    broker: str | None = None


class _Results(msgspec.Struct, gc=False):
    results: list[_ResultRow]


_ENCODER = msgspec.json.Encoder()


def produce_batch_json(outcome: BatchPutResult | Sequence[PutResult], broker: str | None = None) -> bytes:
    """:class:`ProduceBatchOut` as JSON, built without a pydantic model per message (the same
    bytes as ``model_dump_json``; tested). In a cluster each result names the ``broker``."""
    if isinstance(outcome, BatchPutResult):
        n = len(outcome)
        rows = list(
            map(
                _ResultRow,
                _msg_ids(outcome),
                outcome.uniq_keys,
                repeat(outcome.topic, n),
                outcome.queue_ids.tolist(),
                outcome.queue_offsets.tolist(),
                outcome.commitlog_offsets.tolist(),
                repeat(outcome.store_timestamp_ms, n),
                repeat(broker, n),
            )
        )
    else:
        rows = [
            _ResultRow(
                r.msg_id, r.uniq_key, r.topic, r.queue_id, r.queue_offset, r.commitlog_offset,
                r.store_timestamp_ms, broker,
            )
            for r in outcome
        ]  # fmt: skip
    return _ENCODER.encode(_Results(rows))


def _string_array(values: Sequence[str]) -> pa.Array:
    """``values`` as an Arrow string column; UNIQ_KEYs (32 ASCII characters each, as the store
    makes them) are laid on one joined buffer instead of converted one by one."""
    array = getattr(values, "array", None)  # a store column kept in Arrow already
    if isinstance(array, pa.StringArray):
        return array
    count = len(values)
    if count == 0:
        return pa.array([], pa.string())
    joined = "".join(values)
    width = len(joined) // count
    if width and joined.isascii() and width * count == len(joined) and set(map(len, values)) == {width}:
        offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
        return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(joined.encode("ascii")))
    return pa.array(list(values), pa.string())


def produce_one_json(result: PutResult) -> bytes:
    """:class:`ProduceOut` of one result as JSON (the same bytes as ``model_dump_json``; tested)."""
    row = _ResultRow(
        result.msg_id, result.uniq_key, result.topic, result.queue_id, result.queue_offset,
        result.commitlog_offset, result.store_timestamp_ms,
    )  # fmt: skip
    return _ENCODER.encode(row)


def produce_results_stream(outcome: BatchPutResult | Sequence[PutResult]) -> memoryview:
    """The same results as :func:`produce_batch_json`, as an Arrow IPC stream in
    :data:`PRODUCE_RESULT_SCHEMA` (one row per message, in input order)."""
    if isinstance(outcome, BatchPutResult):
        n = len(outcome)
        columns = [
            _msg_id_array(outcome),
            _string_array(outcome.uniq_keys),
            pa.repeat(pa.scalar(outcome.topic, pa.string()), n),
            pa.array(outcome.queue_ids, pa.int32()),
            pa.array(outcome.queue_offsets, pa.int64()),
            pa.array(outcome.commitlog_offsets, pa.int64()),
            pa.array(np.full(n, outcome.store_timestamp_ms, dtype=np.int64)),
        ]
    else:
        columns = [
            pa.array([r.msg_id for r in outcome], pa.string()),
            pa.array([r.uniq_key for r in outcome], pa.string()),
            pa.array([r.topic for r in outcome], pa.string()),
            pa.array([r.queue_id for r in outcome], pa.int32()),
            pa.array([r.queue_offset for r in outcome], pa.int64()),
            pa.array([r.commitlog_offset for r in outcome], pa.int64()),
            pa.array([r.store_timestamp_ms for r in outcome], pa.int64()),
        ]
    return stream_bytes(
        pa.RecordBatch.from_arrays(columns, schema=PRODUCE_RESULT_SCHEMA), PRODUCE_RESULT_SCHEMA
    )


def messages_from_batch(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """:class:`MessageOut` dicts straight from a ``MESSAGE_SCHEMA`` record batch (column-wise
    conversion; no model object per message)."""
    if batch.num_rows == 0:
        return []
    columns = {name: batch.column(name).to_pylist() for name in _PLAIN_COLUMNS}
    for name in ("born_timestamp", "store_timestamp"):
        micros = pc.cast(batch.column(name), pa.int64()).to_numpy(zero_copy_only=False)
        columns[name] = (micros // 1000).tolist()
    bodies = batch.column("body").to_pylist()
    properties = batch.column("properties").to_pylist()
    keys = batch.column("keys").to_pylist()
    rows = []
    for i in range(batch.num_rows):
        row = {name: values[i] for name, values in columns.items()}
        row["keys"] = keys[i] or []
        row["body"], row["body_base64"] = body_fields(bodies[i])
        row["properties"] = dict(properties[i] or ())
        rows.append(row)
    return rows


#: MESSAGE_SCHEMA columns that convert to JSON as they are.
_PLAIN_COLUMNS = (
    "topic", "queue_id", "queue_offset", "commitlog_offset", "msg_id", "uniq_key", "tags", "reconsume_times",
)  # fmt: skip
