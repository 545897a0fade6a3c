"""Producing on this broker: a single message (plain, idempotent or transactional) or a batch,
from the HTTP door's decoded request to the store and back to the answer's bytes.

The routes (:mod:`ingest_api.http.routers.messages`), the fast lane (:mod:`ingest_api.http.fastlane`)
and the cluster's produce paths for this broker's own queues (:mod:`ingest_api.http.cluster_produce`)
all end here; the broker's rules (queue, scheduling, size, the coalesced single put) are
:mod:`broker.produce`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import Response

from broker.errors import BrokerError
from broker.produce import known_queue_count, produce_message, topic_queue_count
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.http import batches, json_batch, producing, render
from ingest_api.http.render import produce_batch_json, produce_results_stream
from ingest_api.http.schemas import (
    ProduceIn,
    ProduceOut,
    TransactionalBatchOut,
    TransactionalProduceOut,
)
from store import ProducerRef, PutResult, TxOutcome
from store.publish import EndRequest


async def produce_one(
    broker: Broker, topic: str, entry: ProduceIn, producer: ProducerRef | None = None
) -> Response:
    """Store one validated, authorised entry and answer 201 (:func:`produce_one_json`)."""
    answer = await produce_one_json(broker, topic, entry, producer)
    return Response(answer, status_code=201, media_type="application/json")


async def produce_one_json(
    broker: Broker, topic: str, entry: ProduceIn, producer: ProducerRef | None = None
) -> bytes:
    """Store one validated, authorised entry and render the 201 answer's body. The route above
    and the fast lane (:mod:`ingest_api.http.fastlane`) both end here; errors are raised as
    :class:`BrokerError` / store errors for the one error mapping in :mod:`ingest_api.http.errors`."""
    started = time.perf_counter()
    store = broker.store
    if entry.transaction is not None and producer is None and broker.operators is not None:
        board = broker.operators.transactions
        if board is not None:  # group commit of halves, like plain single produces
            group = entry.transaction.producer_group
            if known_queue_count(store, topic) is None:
                await run_blocking(store.ensure_topic, topic)
            txid, (half,) = producing.transaction_messages(store, topic, [entry], group)
            result = await broker.producer.put(half)
            board.service.register(txid, group, [result], result.store_timestamp_ms, [topic])
            if entry.transaction.commit:  # grouped with concurrent ends into one append
                ended = await board.ends.end(EndRequest(txid, TxOutcome.COMMIT, group))
                result = ended.transaction.results[0] if ended.transaction.results else result
            broker.metrics.produced(topic, 1, len(half.body), "single", time.perf_counter() - started)
            out = TransactionalProduceOut(**ProduceOut.of(result).model_dump(), transaction_id=txid)
            return out.model_dump_json().encode()
    if entry.transaction is not None:
        txid, results = await run_blocking(_put_transaction, broker, topic, [entry], producer)
        broker.metrics.produced(topic, 1, 0, "single", time.perf_counter() - started)
        out = TransactionalProduceOut(**ProduceOut.of(results[0]).model_dump(), transaction_id=txid)
        return out.model_dump_json().encode()
    queue_count = await topic_queue_count(broker, topic)
    config = store.config
    message = producing.entry_message(
        topic,
        entry,
        queue_count,
        config.max_message_size_bytes,
        None,
        config.timer_max_delay_ms,
        store.now_ms(),
    )
    result = await produce_message(broker, message, producer, started=started)
    return render.produce_one_json(result)


def _put_transaction(
    broker: Broker, topic: str, entries: Sequence[ProduceIn], producer: ProducerRef | None
) -> tuple[str, list[PutResult]]:
    groups = {e.transaction.producer_group if e.transaction else None for e in entries}
    if len(groups) != 1 or None in groups:
        raise BrokerError(
            400,
            "invalid_transaction",
            "a batch is one transaction: give 'transaction' once for the batch, or the same on every entry",
        )
    (group,) = groups
    assert group is not None
    board = broker.operators.transactions if broker.operators is not None else None
    if board is None:
        raise BrokerError(503, "transactions_unavailable", "this broker has no transaction service")
    txid, results = producing.put_transaction(broker.store, board.service, topic, entries, group, producer)
    if any(e.transaction is not None and e.transaction.commit for e in entries):
        ended = board.service.end(txid, TxOutcome.COMMIT, group)
        results = ended.transaction.results or results
    return txid, results


@dataclass(frozen=True)
class BatchRequest:
    topic: str
    content_type: str
    raw: bytes
    arrow_results: bool
    producer: ProducerRef | None = None
    #: Checks the principal's produce right on another topic named by an entry.
    authorize_topic: Callable[[str], None] | None = None


def produce_batch_here(broker: Broker, request: BatchRequest) -> tuple[str | bytes | memoryview, int, int]:
    """Decode, validate and store a batch; returns (response body, messages, body bytes).
    Worker thread."""
    limit = broker.config.max_batch_messages
    topic, content_type, raw = request.topic, request.content_type, request.raw
    if content_type == batches.ARROW_STREAM:
        arrow_batch = batches.parse_arrow_batch(raw, limit)
        results, body_bytes = producing.put_arrow(broker.store, topic, arrow_batch, request.producer)
    else:
        decode_fast = (
            json_batch.decode_ndjson_batch if content_type == batches.NDJSON else json_batch.decode_json_batch
        )
        fast = decode_fast(raw, limit)
        if fast is not None:  # msgspec accepted it as the models would: straight to columns
            results, body_bytes = producing.put_fields(broker.store, topic, *fast, request.producer)
            payload = (
                produce_results_stream(results) if request.arrow_results else produce_batch_json(results)
            )
            return payload, len(results), body_bytes
        if content_type == batches.NDJSON:
            entries = batches.parse_ndjson_batch(raw, limit)
        else:
            entries = batches.parse_json_batch(raw, limit)
        if request.authorize_topic is not None:
            for other in producing.entry_topics(topic, entries)[1:]:
                request.authorize_topic(other)
        if any(e.transaction is not None for e in entries):
            txid, rows = _put_transaction(broker, topic, entries, request.producer)
            out = TransactionalBatchOut(results=[ProduceOut.of(r) for r in rows], transaction_id=txid)
            return out.model_dump_json(), len(rows), sum(len(e.body or e.body_base64 or "") for e in entries)
        results, body_bytes = producing.put_entries(broker.store, topic, entries, request.producer)
    payload = produce_results_stream(results) if request.arrow_results else produce_batch_json(results)
    return payload, len(results), body_bytes
