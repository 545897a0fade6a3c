"""Fetch: ConsumeQueue range -> Arrow batch from the store -> one fresh RecordBatch v2.

* Long poll: while fewer than ``min_bytes`` are ready the request parks on the arrival
  notifier (woken by the store's arrival listener) until ``max_wait_ms`` passes; it never
  blocks the loop, and the store reads run on the gateway's thread pool.
* Limits: each partition gets at most ``partition_max_bytes``, the response at most
  ``max_bytes`` in total, except that the first record of the first non-empty partition is
  always returned (KIP-74) so an oversized message cannot wedge a consumer.
* Fetch sessions (KIP-227) are not kept: ``session_id`` is always 0, so clients send full
  fetches. ``records`` is never null (librdkafka rejects a null MessageSet).
* ``high_watermark`` = ``last_stable_offset`` = the store's max offset (next offset to be
  written, counting only dispatched messages), ``log_start_offset`` = its min offset; a
  fetch offset outside ``[min, max]`` is OFFSET_OUT_OF_RANGE.
* In a cluster a partition another broker owns is NOT_LEADER_OR_FOLLOWER, with its leader in
  ``current_leader`` from v12 on (KIP-951), so the client goes there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.kafka import codec
from ingest_api.kafka.codec import KafkaRequest
from ingest_api.kafka.context import GatewayContext
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.handlers.base import Connection
from ingest_api.kafka.handlers.topics import current_leader, partition_count, served_partition_error
from ingest_api.kafka.mapping import only_hidden_properties, stored_record
from ingest_api.kafka.records import Header, encode_records
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.versions import ApiKey
from store import UnknownQueue, UnknownTopic

#: Messages asked from the store per partition read (the byte budget usually stops earlier).
MAX_MESSAGES_PER_READ = 10_000
#: Assumed smallest encoded record, used to size a read from a byte budget.
MIN_RECORD_BYTES = 24
#: Fetch answers name a partition's current leader from this version on (KIP-951).
CURRENT_LEADER_VERSION = 12


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int


@dataclass(slots=True)
class PartitionData:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    #: Records encoded into ``records`` and the sum of their value sizes (for the metrics).
    messages: int = 0
    body_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RecordColumns:
    offsets: list[int]
    timestamps_ms: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[Header, ...]] | None  # None: no record has headers


def _all_empty(column: pa.Array) -> bool:
    """True when every entry of a list/map column is null or empty (from its offsets)."""
    offsets = column.offsets
    return len(column) == 0 or offsets[0].as_py() == offsets[len(offsets) - 1].as_py()


def columns_from_arrow(batch: pa.RecordBatch) -> RecordColumns:
    """Kafka record columns of a ``MESSAGE_SCHEMA`` batch (see :mod:`ingest_api.kafka.mapping`)."""
    n = batch.num_rows
    offsets = batch.column("queue_offset").to_pylist()
    born_ms = pc.divide(batch.column("born_timestamp").cast(pa.int64()), 1000).to_pylist()
    bodies = batch.column("body").to_pylist()
    keys_column = batch.column("keys")
    properties_column = batch.column("properties")
    if only_hidden_properties(properties_column):  # nothing but keys shapes the records
        if _all_empty(keys_column):
            return RecordColumns(offsets, born_ms, [None] * n, bodies, None)
        keys = [" ".join(k).encode("utf-8") if k else None for k in keys_column.to_pylist()]
        return RecordColumns(offsets, born_ms, keys, bodies, None)
    records = [
        stored_record(
            born, body or b"", " ".join(key_list) if key_list else None, dict(props) if props else {}
        )
        for born, key_list, body, props in zip(
            born_ms, keys_column.to_pylist(), bodies, properties_column.to_pylist(), strict=True
        )
    ]
    return RecordColumns(
        offsets,
        born_ms,
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


def encode_columns(columns: RecordColumns, max_bytes: int) -> bytes:
    """Batches for runs of consecutive offsets (normally one run), within ``max_bytes``."""
    return encode_columns_counted(columns, max_bytes)[0]


def encode_columns_counted(columns: RecordColumns, max_bytes: int) -> tuple[bytes, int]:
    """:func:`encode_columns` and how many records (the first ones) it encoded."""
    offsets = columns.offsets
    encoded = 0
    out: list[bytes] = []
    used = 0
    start = 0
    while start < len(offsets):
        end = start + 1
        if offsets[-1] - offsets[start] == len(offsets) - 1 - start:
            end = len(offsets)  # the common case: the rest is one contiguous run
        while end < len(offsets) and offsets[end] == offsets[end - 1] + 1:
            end += 1
        budget = max_bytes - used
        if budget <= 0:
            break
        data, written = encode_records(
            offsets[start],
            columns.timestamps_ms[start:end],
            columns.keys[start:end],
            columns.values[start:end],
            None if columns.headers is None else columns.headers[start:end],
            budget,
        )
        if data and out and used + len(data) > max_bytes:
            break
        out.append(data)
        used += len(data)
        encoded += written
        if written < end - start:
            break
        start = end
    return b"".join(out), encoded


def read_partition(
    store: KafkaStore, request: PartitionFetch, budget: int, *, allow_oversize: bool = True
) -> PartitionData:
    """Blocking: one partition's answer using at most ``budget`` bytes of records.

    With ``allow_oversize`` the first record is returned even when it alone exceeds the budget.
    """
    count = partition_count(store, request.topic)
    if count is None or not 0 <= request.partition < count:
        return PartitionData(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    low = store.min_offset(request.topic, request.partition)
    high = store.max_offset(request.topic, request.partition)
    result = PartitionData(ErrorCode.NONE, high, low)
    if not low <= request.fetch_offset <= high:
        result.error = ErrorCode.OFFSET_OUT_OF_RANGE
        return result
    budget = min(budget, request.max_bytes)
    if request.fetch_offset == high or budget <= 0:
        return result
    wanted = max(1, min(MAX_MESSAGES_PER_READ, budget // MIN_RECORD_BYTES, high - request.fetch_offset))
    read = store.read_batch(request.topic, request.partition, request.fetch_offset, wanted)
    if read.batch.num_rows:
        columns = columns_from_arrow(read.batch)
        encoded, count = encode_columns_counted(columns, budget)
        if allow_oversize or len(encoded) <= budget:
            result.records = encoded
            result.messages = count
            result.body_bytes = sum(len(value or b"") for value in columns.values[:count])
    return result


def read_all(store: KafkaStore, requests: list[PartitionFetch], max_bytes: int) -> list[PartitionData]:
    results: list[PartitionData] = []
    remaining = max_bytes
    for request in requests:
        # KIP-74: until some partition returned data, one record may exceed the budget.
        first = remaining == max_bytes
        try:
            data = read_partition(
                store, request, max(remaining, 1) if first else remaining, allow_oversize=first
            )
        except (UnknownTopic, UnknownQueue):  # deleted while we read it
            data = PartitionData(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        remaining -= len(data.records)
        results.append(data)
    return results


def read_served(ctx: GatewayContext, requests: list[PartitionFetch], max_bytes: int) -> list[PartitionData]:
    """:func:`read_all` of the partitions this broker serves; the others get their routing
    error (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) without a read."""
    if ctx.cluster is None:
        return read_all(ctx.store, requests, max_bytes)
    refused: dict[int, PartitionData] = {}
    for index, fetch in enumerate(requests):
        error = served_partition_error(ctx, fetch.topic, fetch.partition)
        if error != ErrorCode.NONE:
            refused[index] = PartitionData(error)
    served = [fetch for index, fetch in enumerate(requests) if index not in refused]
    data = iter(read_all(ctx.store, served, max_bytes))
    return [refused[index] if index in refused else next(data) for index in range(len(requests))]


async def handle_fetch(ctx: GatewayContext, conn: Connection, request: KafkaRequest) -> bytes:
    body = request.body
    requests = [
        PartitionFetch(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
        for topic in body.topics
        for p in topic.partitions
    ]
    max_bytes = body.max_bytes if body.max_bytes > 0 else 2**31 - 1
    wait_s = max(0, min(body.max_wait_ms, ctx.config.max_fetch_wait_ms)) / 1000
    deadline = ctx.loop.time() + wait_s
    assert ctx.arrivals is not None
    with ctx.arrivals.watch([(r.topic, r.partition) for r in requests]) as arrived:
        while True:
            arrived.clear()
            results = await ctx.run_blocking(read_served, ctx, requests, max_bytes)
            ready = sum(len(r.records) for r in results)
            errors = any(r.error != ErrorCode.NONE for r in results)
            remaining = deadline - ctx.loop.time()
            if ready >= max(body.min_bytes, 1) or errors or remaining <= 0 or not requests:
                break
            try:
                await asyncio.wait_for(arrived.wait(), remaining)
            except TimeoutError:
                if ready:
                    break
                results = await ctx.run_blocking(read_served, ctx, requests, max_bytes)
                break
    if ctx.metrics is not None:
        for fetched, data in zip(requests, results, strict=True):
            ctx.metrics.consumed(fetched.topic, data.messages, data.body_bytes, "kafka")
    return codec.encode_response(
        request,
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        session_id=0,
        responses=_responses(ctx, request.api_version, requests, results),
    )


def _responses(
    ctx: GatewayContext, version: int, requests: list[PartitionFetch], results: list[PartitionData]
) -> list[Any]:
    cls = codec.response_class(ApiKey.FETCH)
    partition_cls = cls.FetchableTopicResponse.PartitionData
    by_topic: dict[str, list[Any]] = {}
    for request, data in zip(requests, results, strict=True):
        extra: dict[str, Any] = {}
        if data.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and version >= CURRENT_LEADER_VERSION:
            extra["current_leader"] = current_leader(ctx, partition_cls, request.topic, request.partition)
        by_topic.setdefault(request.topic, []).append(
            partition_cls(
                partition_index=request.partition,
                error_code=data.error,
                high_watermark=data.high_watermark,
                last_stable_offset=data.high_watermark,
                log_start_offset=data.log_start_offset,
                aborted_transactions=[],
                preferred_read_replica=-1,
                records=data.records,
                **extra,
            )
        )
    return [cls.FetchableTopicResponse(topic=name, partitions=parts) for name, parts in by_topic.items()]
