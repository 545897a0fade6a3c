"""Producing in a cluster: each message stored by the broker that owns its queue.

The receiving broker plans every entry (:mod:`broker.routing`), stores its own part
through the ordinary local paths (:mod:`ingest_api.http.routers.messages`) and forwards the
rest, one request per owner, with every queue id resolved; the owners answer with their broker
name and the answers are merged in entry order.

* A request whose entries all go to one broker is answered as that broker answers it (201, or
  its refusal), so a batch stays all-or-nothing there.
* A batch that spans brokers is answered per entry: ``results[i]`` is the stored message with its
  ``broker``, or ``{"index", "error", "message", "broker"}`` for an entry whose broker refused
  it or is down. Status 201 when every entry is stored, 207 when some are not.
* Idempotency-Key: a retry plans the same way (see routing), so each part reaches the broker
  that holds its first attempt; parts of a spanning request are deduplicated per broker
  (``http:{topic}:{key}#{broker}``), whole requests exactly as on a lone broker.
* A transaction lives on one broker: a transactional batch whose keys map to queues of several
  brokers is refused (400 ``transaction_spans_brokers``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from broker.errors import BrokerError
from broker.peers import PeerUnavailable, passed_headers
from broker.reads import local_ready
from broker.routing import FORWARDED_HEADER, SCOPE_HEADER, Plan
from broker.state import Broker
from broker.threads import run_blocking
from cluster import TopicPlacement, validate_routed
from ingest_api.http import batches, json_batch, producing, render
from ingest_api.http.errors import response_for
from ingest_api.http.local_produce import BatchRequest, produce_batch_here, produce_one_json
from ingest_api.http.schemas import ProduceIn
from store import UNPLACED, ProducerRef, SparkMQError, UnknownTopic

_JSON = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder()


def with_broker(answer: bytes, name: str) -> bytes:
    """A JSON object answer with ``"broker": name`` appended."""
    return answer[:-1] + b',"broker":' + _JSON.encode(name) + b"}"


async def routed(broker: Broker, topic: str) -> TopicPlacement:
    """The topic's placement, creating the topic in the cluster when auto-creation is on."""
    cluster = broker.cluster
    assert cluster is not None
    placement = cluster.view.placement(topic)
    if placement is not None:
        return placement
    validate_routed(topic)
    learned = await run_blocking(cluster.learn_topic, topic)  # created elsewhere just now
    if learned is not None:
        return learned
    if not cluster.config.auto_create_topics:
        raise UnknownTopic(f"topic {topic!r} does not exist")
    return await run_blocking(cluster.ensure_topic, topic)


def scoped_producer(topic: str, key: str | None, scope: str | None) -> ProducerRef | None:
    """The store identity of an idempotent request, or of its part on one broker."""
    if key is None:
        return None
    return ProducerRef(f"http:{topic}:{key}" + (f"#{scope}" if scope else ""))


def error_entry(index: int, broker: str, exc: BrokerError | SparkMQError) -> dict[str, Any]:
    """A per-entry failure of a spanning batch."""
    if isinstance(exc, BrokerError):
        return {"index": index, "error": exc.code, "message": exc.message, "broker": broker}
    return {"index": index, "error": exc.code, "message": str(exc), "broker": broker}


# -- single produce -----------------------------------------------------------------------------


async def produce_single(
    broker: Broker, topic: str, entry: ProduceIn, headers: Mapping[str, str], idempotency_key: str | None
) -> tuple[int, bytes]:
    """One message stored on its owner; ``(status, JSON body)``."""

    cluster = broker.cluster
    assert cluster is not None
    assert broker.planner is not None
    forwarded = FORWARDED_HEADER in headers
    placement = await routed(broker, topic)
    serving = cluster.serving
    owner, queue = broker.planner.plan_one(
        cluster.view,
        topic,
        entry.queue_id,
        entry.sharding_key,
        anchor=idempotency_key,
        forwarded=forwarded,
        serving=serving,
    )
    # The request's own validated entry: placed in place (no copy on the hot path).
    entry.queue_id, entry.sharding_key = (None if queue == UNPLACED else queue), None
    placed = entry
    if owner == cluster.name and serving:
        store = broker.store
        if not store.has_topic(topic) or store.queue_count(topic) < placement.queue_count:
            await local_ready(broker, {topic: placement})
        producer = scoped_producer(topic, idempotency_key, headers.get(SCOPE_HEADER))
        answer = await produce_one_json(broker, topic, placed, producer)
        return 201, with_broker(answer, cluster.name)
    body = placed.model_dump_json(exclude_none=True, exclude_defaults=True).encode()
    if idempotency_key is None and entry.transaction is None and broker.forwarder is not None:
        coalesced: tuple[int, bytes] = await broker.forwarder.produce(
            cluster.view, owner, topic, body, headers
        )
        return coalesced
    response = await broker.peers.request(
        cluster.view.master_of(owner),
        owner,
        "POST",
        f"/topics/{topic}/messages",
        headers={**passed_headers(headers), "content-type": batches.JSON},
        content=body,
    )
    return response.status_code, response.content


# -- batches --------------------------------------------------------------------------------------


def decoded_entries(content_type: str, raw: bytes, limit: int) -> tuple[list[dict[str, Any]], Any]:
    """Validate a JSON/NDJSON batch as the local path would (400 naming the entry), and return
    its entries as plain dicts (to be re-sent) with its ``transaction`` field."""
    if content_type == batches.NDJSON:
        fast = json_batch.decode_ndjson_batch(raw, limit)
        if fast is None:
            batches.parse_ndjson_batch(raw, limit)
        lines = [line for line in raw.split(b"\n") if line.strip()]
        return [_DECODE.decode(line) for line in lines], None
    fast = json_batch.decode_json_batch(raw, limit)
    if fast is None:
        batches.parse_json_batch(raw, limit)
    document = _DECODE.decode(raw)
    return list(document["messages"]), document.get("transaction")


def entry_plan(
    broker: Broker, path_topic: str, entries: Sequence[Mapping[str, Any]], key: str | None, forwarded: bool
) -> tuple[list[str], Plan]:
    cluster = broker.cluster
    assert cluster is not None
    assert broker.planner is not None
    topics = [str(e.get("topic") or path_topic) for e in entries]
    plan = broker.planner.plan(
        cluster.view,
        topics,
        [e.get("queue_id") for e in entries],
        [e.get("sharding_key") for e in entries],
        anchor=key,
        forwarded=forwarded,
        serving=cluster.serving,
    )
    return topics, plan


def part_body(
    entries: Sequence[Mapping[str, Any]], indexes: Sequence[int], plan: Plan, transaction: Any
) -> bytes:
    """The JSON batch of one broker's part, queue ids resolved, sharding keys dropped."""
    part = []
    for i in indexes:
        entry = {name: value for name, value in entries[i].items() if name != "sharding_key"}
        queue = int(plan.queue_ids[i])
        entry["queue_id"] = None if queue == UNPLACED else queue
        part.append(entry)
    document: dict[str, Any] = {"messages": part}
    if transaction is not None:
        document["transaction"] = transaction
    return _JSON.encode(document)


async def produce_json_batch(
    broker: Broker,
    topic: str,
    content_type: str,
    raw: bytes,
    headers: Mapping[str, str],
    key: str | None,
    arrow_results: bool,
    authorize_topic: Any,
) -> tuple[int, bytes | memoryview, str, int]:
    """A JSON or NDJSON batch in a cluster: ``(status, body, media type, stored count)``."""
    cluster = broker.cluster
    assert cluster is not None
    local = await _all_here(broker, topic, content_type, raw, headers, key, arrow_results)
    if local is not None:
        return local
    entries, transaction = decoded_entries(content_type, raw, broker.config.max_batch_messages)
    topics = list(dict.fromkeys([topic, *(str(e["topic"]) for e in entries if e.get("topic"))]))
    if authorize_topic is not None:
        for other in topics[1:]:
            authorize_topic(other)
    placements = {t: await routed(broker, t) for t in topics}
    forwarded = FORWARDED_HEADER in headers
    _, plan = entry_plan(broker, topic, entries, key, forwarded)
    groups = plan.groups()
    transactional = transaction is not None or any(e.get("transaction") for e in entries)
    if transactional and len(groups) > 1:
        raise BrokerError(
            400,
            "transaction_spans_brokers",
            f"a transaction lives on one broker, and these messages map to queues of {', '.join(groups)}: "
            "send them without sharding keys or queue ids, or split the transaction",
        )
    spans = len(groups) > 1
    parts = {owner: part_body(entries, indexes, plan, transaction) for owner, indexes in groups.items()}
    outcomes = await asyncio.gather(
        *(
            _send_part(
                broker,
                owner,
                topic,
                batches.JSON,
                parts[owner],
                headers,
                key,
                spans,
                arrow_results and not spans,
                placements,
            )
            for owner in groups
        )
    )
    if not spans:
        (status, body, media, count) = outcomes[0]
        return status, body, media, count
    return _merge(groups, outcomes, arrow_results)


async def _all_here(
    broker: Broker,
    topic: str,
    content_type: str,
    raw: bytes,
    headers: Mapping[str, str],
    key: str | None,
    arrow_results: bool,
) -> tuple[int, bytes | memoryview, str, int] | None:
    """The common case, without re-encoding: a plain batch (no transaction, no other topic)
    that msgspec decodes and whose every entry is planned on this broker is stored here at once,
    with the planned queue ids. ``None``: take the general path."""
    cluster = broker.cluster
    assert cluster is not None
    assert broker.planner is not None
    limit = broker.config.max_batch_messages
    decode = (
        json_batch.decode_ndjson_batch if content_type == batches.NDJSON else json_batch.decode_json_batch
    )
    fast = decode(raw, limit)
    if fast is None:
        return None
    entries, bodies = fast
    placement = await routed(broker, topic)
    plan = broker.planner.plan(
        cluster.view,
        [topic] * len(entries),
        [e.queue_id for e in entries],
        [e.sharding_key for e in entries],
        anchor=key,
        forwarded=FORWARDED_HEADER in headers,
        serving=cluster.serving,
    )
    if any(owner != cluster.name for owner in plan.owners) or not cluster.serving:
        return None
    for entry, queue in zip(entries, plan.queue_ids.tolist(), strict=True):
        entry.queue_id, entry.sharding_key = queue, None  # decoded structs: ours to place
    await local_ready(broker, {topic: placement})
    producer = scoped_producer(topic, key, headers.get(SCOPE_HEADER))
    outcome, _ = await run_blocking(producing.put_fields, broker.store, topic, entries, bodies, producer)
    if arrow_results:
        return 201, render.produce_results_stream(outcome), batches.ARROW_STREAM, len(outcome)
    return 201, render.produce_batch_json(outcome, cluster.name), "application/json", len(outcome)


async def _send_part(
    broker: Broker,
    owner: str,
    topic: str,
    content_type: str,
    body: bytes,
    headers: Mapping[str, str],
    key: str | None,
    spans: bool,
    arrow_results: bool,
    placements: Mapping[str, TopicPlacement],
) -> tuple[int, bytes | memoryview, str, int]:
    """Store one broker's part here, or forward it to its owner: ``(status, body, media, stored)``."""

    cluster = broker.cluster
    assert cluster is not None
    scope = owner if spans else headers.get(SCOPE_HEADER)
    if owner == cluster.name and cluster.serving:
        await local_ready(broker, placements)
        request = BatchRequest(topic, content_type, body, arrow_results, scoped_producer(topic, key, scope))
        try:
            payload, count, _ = await run_blocking(produce_batch_here, broker, request)
        except (BrokerError, SparkMQError) as exc:
            response = response_for(exc)
            return response.status_code, bytes(response.body), "application/json", 0
        if arrow_results:
            return (
                201,
                payload if not isinstance(payload, str) else payload.encode(),
                batches.ARROW_STREAM,
                count,
            )
        text = payload.encode() if isinstance(payload, str) else bytes(payload)
        return 201, _results_with_broker(text, cluster.name), "application/json", count
    sent = {**passed_headers(headers), "content-type": content_type}
    if spans:
        sent[SCOPE_HEADER] = owner
    if not arrow_results:
        sent.pop("accept", None)
    try:
        response = await broker.peers.request(
            cluster.view.master_of(owner),
            owner,
            "POST",
            f"/topics/{topic}/messages:batch",
            headers=sent,
            content=body,
        )
    except PeerUnavailable as exc:
        answer = response_for(exc)
        return answer.status_code, bytes(answer.body), "application/json", 0
    media = response.headers.get("content-type", "application/json").split(";")[0]
    count = (
        _stored_count(response.content) if response.status_code == 201 and media == "application/json" else 0
    )
    return response.status_code, response.content, media, count


def _results_with_broker(payload: bytes, name: str) -> bytes:
    document = _DECODE.decode(payload)
    for result in document.get("results", ()):
        result["broker"] = name
    return _JSON.encode(document)


def _stored_count(payload: bytes) -> int:
    try:
        return len(_DECODE.decode(payload).get("results", ()))
    except (msgspec.DecodeError, AttributeError):
        return 0


def _merge(
    groups: Mapping[str, list[int]],
    outcomes: Sequence[tuple[int, bytes | memoryview, str, int]],
    arrow_results: bool,
) -> tuple[int, bytes | memoryview, str, int]:
    """One per-entry answer from the parts' answers (entry order)."""
    total = sum(len(indexes) for indexes in groups.values())
    merged: list[dict[str, Any] | None] = [None] * total
    stored = 0
    for (owner, indexes), (status, body, _, count) in zip(groups.items(), outcomes, strict=True):
        document = _DECODE.decode(bytes(body)) if body else {}
        if status == 201:
            stored += count
            for i, result in zip(indexes, document.get("results", ()), strict=True):
                merged[i] = {**result, "broker": owner}
            continue
        for i in indexes:
            merged[i] = {
                "index": i,
                "error": document.get("error", "forward_failed"),
                "message": document.get("message", f"broker {owner} answered {status}"),
                "broker": owner,
            }
    status = 201 if stored == total else 207
    if arrow_results and status == 201:
        table = pa.Table.from_pylist([row for row in merged if row is not None])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return status, memoryview(sink.getvalue()), batches.ARROW_STREAM, stored
    return status, _JSON.encode({"results": merged}), "application/json", stored


# -- Arrow batches --------------------------------------------------------------------------------


async def produce_arrow_batch(
    broker: Broker, topic: str, raw: bytes, headers: Mapping[str, str], key: str | None, arrow_results: bool
) -> tuple[int, bytes | memoryview, str, int]:
    """An Arrow batch in a cluster: split by owner into Arrow parts with queue ids resolved."""
    cluster = broker.cluster
    assert cluster is not None
    assert broker.planner is not None
    arrow_batch = batches.parse_arrow_batch(raw, broker.config.max_batch_messages)
    placements = {topic: await routed(broker, topic)}
    n = len(arrow_batch)
    explicit = arrow_batch.queue_id.to_pylist() if arrow_batch.queue_id is not None else [None] * n
    sharding = arrow_batch.sharding_key.to_pylist() if arrow_batch.sharding_key is not None else [None] * n
    plan = broker.planner.plan(
        cluster.view,
        [topic] * n,
        explicit,
        sharding,
        anchor=key,
        forwarded=FORWARDED_HEADER in headers,
        serving=cluster.serving,
    )
    groups = plan.groups()
    spans = len(groups) > 1
    table = batches.read_arrow_table(raw)
    if "sharding_key" in table.column_names:
        table = table.drop_columns(["sharding_key"])
    queue_ids = pa.array(
        np.where(plan.queue_ids == UNPLACED, 0, plan.queue_ids), pa.int32(), mask=plan.queue_ids == UNPLACED
    )
    if "queue_id" in table.column_names:
        table = table.drop_columns(["queue_id"])
    table = table.append_column("queue_id", queue_ids)
    parts = {}
    for owner, indexes in groups.items():
        sink = pa.BufferOutputStream()
        part = table.take(pa.array(indexes, pa.int64()))
        with pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
        parts[owner] = sink.getvalue().to_pybytes()
    outcomes = await asyncio.gather(
        *(
            _send_part(
                broker,
                owner,
                topic,
                batches.ARROW_STREAM,
                parts[owner],
                headers,
                key,
                spans,
                arrow_results and not spans,
                placements,
            )
            for owner in groups
        )
    )
    if not spans:
        return outcomes[0]
    return _merge(groups, outcomes, arrow_results)
