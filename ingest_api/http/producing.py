"""Turning validated produce requests into store writes.

The ``put_*`` functions and :func:`ensure_topic` block on the store and run in worker
threads; the rest is pure or in-memory. Queue choice: an explicit ``queue_id``; else a
``sharding_key`` hashed like RocketMQ's ``SelectMessageQueueByHash`` (``abs(key.hashCode()) %
queues``, so one key always lands on one queue and keeps its order); else ``None``, which lets
the store go round robin. Batches go through the store's columnar ``put_batch`` when they fit
it and through ``put_messages`` otherwise; both are all-or-nothing.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ingest_api.http.batches import ArrowBatch, check_body_sizes, schedule_error
from ingest_api.http.errors import ApiError
from ingest_api.http.schemas import ProduceIn, decode_body
from store import (
    PROPERTY_PGROUP,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_ID,
    BatchPutResult,
    Message,
    MessageStore,
    ProducerRef,
    PutResult,
    UnknownTopic,
    is_timer_request,
    java_string_hash,
    java_string_hashes,
    request_uniq_keys,
    validate_topic,
)
from store.publish.transactions import TransactionService

ProduceOutcome = BatchPutResult | list[PutResult]

#: Above this many distinct property names a batch goes row by row (columns stop paying).
MAX_PROPERTY_COLUMNS = 64


#: Longest accepted ``Idempotency-Key`` header value.
MAX_IDEMPOTENCY_KEY_CHARS = 200
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]+")


def idempotency_ref(topic: str, key: str | None) -> ProducerRef | None:
    """The store request identity for an ``Idempotency-Key`` header (None without one).

    A retried request with the same key (and topic) returns the original results instead of
    writing again, also after a broker restart (see :mod:`store.write.idempotence`)."""
    if key is None:
        return None
    if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY_CHARS or _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise ApiError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters",
        )
    return ProducerRef(f"http:{topic}:{key}")


def sharding_queue(key: str, queue_count: int) -> int:
    """RocketMQ ``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)``."""
    return abs(java_string_hash(key)) % queue_count


def sharding_queues(keys: Sequence[str], queue_count: int) -> npt.NDArray[np.int32]:
    hashes = java_string_hashes(keys).astype(np.int64)
    return (np.abs(hashes) % queue_count).astype(np.int32)


def ensure_topic(store: MessageStore, topic: str) -> int:
    """Queue count of ``topic``, creating it when auto-creation is on; else :class:`UnknownTopic`."""
    validate_topic(topic)
    if not store.has_topic(topic):
        if not store.config.auto_create_topics:
            raise UnknownTopic(f"topic {topic!r} does not exist (auto-creation is off)")
        return store.create_topic(topic)
    return store.queue_count(topic)


def known_queue_count(store: MessageStore, topic: str) -> int | None:
    """Queue count of an existing topic, None when it does not exist. Never blocks on I/O, so
    the event loop may call it."""
    validate_topic(topic)
    return store.queue_count(topic) if store.has_topic(topic) else None


def _unknown_queue(queue_id: int, topic: str, queue_count: int, index: int | None = None) -> ApiError:
    where = f"messages[{index}]: " if index is not None else ""
    return ApiError(
        400,
        "unknown_queue",
        f"{where}queue_id {queue_id} is outside topic {topic!r}'s {queue_count} queues",
        index=index,
    )


def _too_large(size: int, limit: int, index: int | None = None) -> ApiError:
    where = f"messages[{index}]: " if index is not None else ""
    return ApiError(
        413, "message_too_large", f"{where}body is {size} bytes; the limit is {limit}", index=index
    )


def scheduling(
    delay_level: int | None,
    deliver_at_ms: int | None,
    delay_ms: int | None,
    *,
    max_delay_ms: int,
    index: int | None = None,
    now_ms: int | None = None,
) -> tuple[int, dict[str, str]]:
    """``(delay level, timer properties)`` for the three scheduling fields, or a 400 naming the
    field: at most one of them; a level >= 0 (0 = none; above the table clamps); a timer no
    further out than ``max_delay_ms`` (the store checks that again when it parks it)."""
    given = [
        name
        for name, value in (
            ("delay_level", delay_level),
            ("deliver_at_ms", deliver_at_ms),
            ("delay_ms", delay_ms),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise schedule_error(
            f"give at most one of 'delay_level', 'deliver_at_ms' and 'delay_ms' (got {' and '.join(given)})",
            given[1],
            index,
        )
    if delay_level is not None:
        if delay_level < 0:
            raise schedule_error(
                f"delay_level must be >= 0 (0 = no delay), got {delay_level}", "delay_level", index
            )
        return delay_level, {}
    if deliver_at_ms is None and delay_ms is None:
        return 0, {}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if delay_ms is not None:
        field, wait, prop = "delay_ms", delay_ms, {PROPERTY_TIMER_DELAY_MS: str(delay_ms)}
        if delay_ms < 0:
            raise schedule_error(f"delay_ms must be >= 0, got {delay_ms}", field, index)
    else:
        assert deliver_at_ms is not None
        field, wait, prop = (
            "deliver_at_ms",
            deliver_at_ms - now,
            {PROPERTY_TIMER_DELIVER_MS: str(deliver_at_ms)},
        )
        if deliver_at_ms < 0:
            raise schedule_error(
                f"deliver_at_ms must be an epoch millisecond >= 0, got {deliver_at_ms}", field, index
            )
    if wait > max_delay_ms:
        raise schedule_error(
            f"{field} is {wait} ms ahead; the broker's --timer-max-delay is {max_delay_ms} ms", field, index
        )
    return 0, prop


def entry_message(
    topic: str, entry: ProduceIn, queue_count: int, max_body: int, index: int | None, max_delay_ms: int
) -> Message:
    """The store message for a validated entry: queue resolved, scheduling fields checked,
    body size checked."""
    queue_id = entry.queue_id
    if queue_id is not None and queue_id >= queue_count:
        raise _unknown_queue(queue_id, topic, queue_count, index)
    if entry.sharding_key is not None:
        queue_id = sharding_queue(entry.sharding_key, queue_count)
    level, schedule = scheduling(
        entry.delay_level, entry.deliver_at_ms, entry.delay_ms, max_delay_ms=max_delay_ms, index=index
    )
    message = entry.to_message(topic, queue_id, level, schedule)
    if len(message.body) > max_body:
        raise _too_large(len(message.body), max_body, index)
    return message


def put_entries(
    store: MessageStore, topic: str, entries: Sequence[ProduceIn], producer: ProducerRef | None = None
) -> tuple[ProduceOutcome, int]:
    """Every entry is checked before anything is stored; returns (outcome, body bytes).

    Entries that only carry bodies, tags, keys and properties (round robin, no delay) go
    straight to ``put_batch`` as columns, without a :class:`Message` per entry; the rest go
    through :func:`entry_message` and :func:`put_rows`."""
    queue_count = ensure_topic(store, topic)
    max_body = store.config.max_message_size_bytes
    if any(e.topic not in (None, topic) for e in entries):
        counts = {t: ensure_topic(store, t) for t in entry_topics(topic, entries)}
        max_delay = store.config.timer_max_delay_ms
        messages = [
            entry_message(e.topic or topic, e, counts[e.topic or topic], max_body, i, max_delay)
            for i, e in enumerate(entries)
        ]
        return list(store.put_messages(messages, producer=producer)), sum(len(m.body) for m in messages)
    names = _property_names(e.properties for e in entries)
    if len(names) > MAX_PROPERTY_COLUMNS or any(
        e.queue_id is not None or e.sharding_key is not None or e.scheduled for e in entries
    ):
        max_delay = store.config.timer_max_delay_ms
        messages = [
            entry_message(topic, e, queue_count, max_body, i, max_delay) for i, e in enumerate(entries)
        ]
        return put_rows(store, topic, messages, producer), sum(len(m.body) for m in messages)
    bodies = [decode_body(e.body, e.body_base64) for e in entries]
    sizes = [len(body) for body in bodies]
    if sizes and max(sizes) > max_body:
        index = next(i for i, size in enumerate(sizes) if size > max_body)
        raise _too_large(sizes[index], max_body, index)
    outcome = _put_columns(
        store, topic, bodies, None, [e.tags for e in entries], [e.keys for e in entries],
        [e.properties for e in entries], names, producer,
    )  # fmt: skip
    return outcome, sum(sizes)


def _property_names(properties: Iterable[Mapping[str, str]]) -> set[str]:
    names: set[str] = set()
    for each in properties:
        names.update(each)
    return names


def _put_columns(
    store: MessageStore,
    topic: str,
    bodies: list[bytes],
    queue_ids: npt.NDArray[np.int32] | None,
    tags: list[str | None],
    keys: Sequence[Sequence[str]],
    properties: Sequence[Mapping[str, str]],
    names: set[str],
    producer: ProducerRef | None = None,
) -> BatchPutResult:
    """One ``put_batch`` from per-message fields (the shared tail of :func:`put_entries` and
    :func:`put_rows`)."""
    joined_keys = [" ".join(each) or None for each in keys]
    return store.put_batch(
        topic,
        bodies,
        queue_ids=queue_ids,
        tags=tags if any(t is not None for t in tags) else None,
        keys=joined_keys if any(k is not None for k in joined_keys) else None,
        properties={name: [each.get(name) for each in properties] for name in sorted(names)} or None,
        producer=producer,
    )


def put_rows(
    store: MessageStore, topic: str, messages: Sequence[Message], producer: ProducerRef | None = None
) -> ProduceOutcome:
    """Messages of one topic through the columnar ``put_batch`` when they fit it (no delay
    levels, queue ids on every message or on none, a modest set of property names); else
    ``put_messages``. Both are all-or-nothing."""
    placed = sum(m.queue_id is not None for m in messages)
    names = _property_names(m.properties for m in messages)
    if (
        any(m.delay_level or is_timer_request(m.properties) for m in messages)
        or 0 < placed < len(messages)
        or len(names) > MAX_PROPERTY_COLUMNS
    ):
        return list(store.put_messages(messages, producer=producer))
    queue_ids = np.fromiter((m.queue_id or 0 for m in messages), np.int32, len(messages)) if placed else None
    return _put_columns(
        store, topic, [m.body for m in messages], queue_ids, [m.tags for m in messages],
        [m.keys for m in messages], [m.properties for m in messages], names, producer,
    )  # fmt: skip


def arrow_queue_ids(topic: str, batch: ArrowBatch, queue_count: int) -> npt.NDArray[np.int32] | None:
    """Per-row queue ids (-1 = round robin), or None when every row is round robin."""
    if batch.queue_id is None and batch.sharding_key is None:
        return None
    queue_ids = np.full(len(batch), -1, dtype=np.int32)
    if batch.queue_id is not None:
        explicit = pc.fill_null(batch.queue_id, -1).to_numpy(zero_copy_only=False).astype(np.int32)
        too_big = np.flatnonzero(explicit >= queue_count)
        if len(too_big):
            row = int(too_big[0])
            raise _unknown_queue(int(explicit[row]), topic, queue_count, row)
        queue_ids = explicit
    if batch.sharding_key is not None:
        rows = np.flatnonzero(pc.is_valid(batch.sharding_key).to_numpy(zero_copy_only=False))
        if len(rows):
            keys = pc.take(batch.sharding_key, pa.array(rows)).to_pylist()
            queue_ids[rows] = sharding_queues(keys, queue_count)
    if (queue_ids < 0).all():
        return None
    return queue_ids


def arrow_messages(
    topic: str, batch: ArrowBatch, queue_ids: npt.NDArray[np.int32] | None, max_delay_ms: int
) -> list[Message]:
    """Row-wise :class:`Message` objects (the path used when a column feature needs it)."""
    now_ms = int(time.time() * 1000)
    n = len(batch)
    bodies = batch.body.to_pylist()
    tags = batch.tags.to_pylist() if batch.tags is not None else [None] * n
    keys = batch.keys.to_pylist() if batch.keys is not None else [None] * n
    props = batch.properties.to_pylist() if batch.properties is not None else [None] * n
    delays = batch.delay_level.to_pylist() if batch.delay_level is not None else [None] * n
    deliver_at = batch.deliver_at_ms.to_pylist() if batch.deliver_at_ms is not None else [None] * n
    delay_ms = batch.delay_ms.to_pylist() if batch.delay_ms is not None else [None] * n
    qids = queue_ids.tolist() if queue_ids is not None else [-1] * n
    messages = []
    for i in range(n):
        level, schedule = scheduling(
            delays[i], deliver_at[i], delay_ms[i], max_delay_ms=max_delay_ms, index=i, now_ms=now_ms
        )
        messages.append(
            Message(
                topic=topic,
                body=bodies[i],
                tags=tags[i],
                keys=tuple(keys[i] or ()),
                properties={**dict(props[i] or ()), **schedule},
                queue_id=None if qids[i] < 0 else qids[i],
                delay_level=level,
            )
        )
    return messages


def property_columns(column: pa.MapArray, n: int) -> dict[str, list[str | None]] | None:
    """Per-row property maps pivoted to one column per name (None where a row lacks it), or
    None when there are too many distinct names for columns to pay."""
    offsets = column.offsets.to_numpy()
    lengths = np.diff(offsets)
    lengths[~column.is_valid().to_numpy(zero_copy_only=False)] = 0
    if not lengths.any():
        return {}
    names = column.keys.to_pylist()
    values = column.items.to_pylist()
    distinct = set(names)
    if len(distinct) > MAX_PROPERTY_COLUMNS:
        return None
    pivot: dict[str, list[str | None]] = {name: [None] * n for name in sorted(distinct)}
    starts = offsets[:-1] - offsets[0]
    for row in np.flatnonzero(lengths).tolist():
        for item in range(int(starts[row]), int(starts[row] + lengths[row])):
            pivot[names[item]][row] = values[item]
    return pivot


def _columnar_queue_ids(queue_ids: npt.NDArray[np.int32] | None) -> tuple[bool, npt.NDArray[np.int32] | None]:
    """(usable by ``put_batch``, its queue_ids): it takes all rows placed or none."""
    if queue_ids is None:
        return True, None
    return bool((queue_ids >= 0).all()), queue_ids


def put_arrow(
    store: MessageStore, topic: str, batch: ArrowBatch, producer: ProducerRef | None = None
) -> tuple[ProduceOutcome, int]:
    """The columnar ``put_batch`` when the batch fits it (no delay levels, queue ids on every
    row or on none, a modest set of property names); else ``put_messages`` row by row.
    Returns (outcome, body bytes)."""
    queue_count = ensure_topic(store, topic)
    sizes = pc.binary_length(batch.body)
    check_body_sizes(sizes, store.config.max_message_size_bytes)
    body_bytes = int(pc.sum(sizes).as_py() or 0)
    queue_ids = arrow_queue_ids(topic, batch, queue_count)
    columnar, batch_queue_ids = _columnar_queue_ids(queue_ids)
    has_delay = any(
        column is not None and column.null_count < len(batch)
        for column in (batch.delay_level, batch.deliver_at_ms, batch.delay_ms)
    )
    properties = property_columns(batch.properties, len(batch)) if batch.properties is not None else {}
    if not columnar or has_delay or properties is None:
        messages = arrow_messages(topic, batch, queue_ids, store.config.timer_max_delay_ms)
        return put_rows(store, topic, messages, producer), body_bytes
    keys = None
    if batch.keys is not None:
        joined = pc.binary_join(batch.keys, " ")
        keys = pc.if_else(pc.equal(joined, ""), None, joined).to_pylist()
    outcome = store.put_batch(
        topic,
        batch.body.to_pylist(),
        queue_ids=batch_queue_ids,
        tags=batch.tags.to_pylist() if batch.tags is not None else None,
        keys=keys,
        properties=properties or None,
        producer=producer,
    )
    return outcome, body_bytes


def transaction_messages(
    store: MessageStore,
    topic: str,
    entries: Sequence[ProduceIn],
    producer_group: str,
    producer: ProducerRef | None = None,
) -> tuple[str, list[Message]]:
    """``(transaction_id, half messages)`` for ``entries`` (RocketMQ ``parseHalfMessageInner``
    happens in the store). The transaction id is the first half's UNIQ_KEY (RocketMQ's
    ``__transactionId__``); every half carries it. A delay or timer is refused: RocketMQ's client
    clears ``DELAY`` on a transactional message, and a timer would deliver a commit late (#1540)."""
    for i, entry in enumerate(entries):
        if entry.scheduled:
            field = next(
                f for f in ("delay_level", "deliver_at_ms", "delay_ms") if getattr(entry, f) is not None
            )
            raise ApiError(
                400,
                "invalid_transaction",
                f"messages[{i}]: a transactional message cannot be delayed ({field})",
                field=field,
                index=i,
            )
    max_body = store.config.max_message_size_bytes
    counts: dict[str, int] = {}
    messages = []
    keys = request_uniq_keys(producer, len(entries)) if producer else [store.new_uniq_key() for _ in entries]
    transaction_id = keys[0]
    for i, entry in enumerate(entries):
        target = entry.topic or topic
        if target not in counts:
            counts[target] = ensure_topic(store, target)
        message = entry_message(target, entry, counts[target], max_body, i, store.config.timer_max_delay_ms)
        system = {PROPERTY_PGROUP: producer_group, PROPERTY_TRANSACTION_ID: transaction_id}
        messages.append(
            dataclasses.replace(
                message,
                properties={**message.properties, **system},
                transaction_prepared=True,
                uniq_key=keys[i],
            )
        )
    return transaction_id, messages


def put_transaction(
    store: MessageStore,
    transactions: TransactionService,
    topic: str,
    entries: Sequence[ProduceIn],
    producer_group: str,
    producer: ProducerRef | None = None,
) -> tuple[str, list[PutResult]]:
    """Store ``entries`` as the halves of one transaction and register it (worker thread)."""
    transaction_id, messages = transaction_messages(store, topic, entries, producer_group, producer)
    results = store.put_messages(messages, producer=producer)
    born = results[0].store_timestamp_ms if results else 0
    transactions.register(transaction_id, producer_group, results, born, [m.topic for m in messages])
    return transaction_id, list(results)


def entry_topics(path_topic: str, entries: Sequence[ProduceIn]) -> list[str]:
    """The distinct topics a batch writes (its path topic first)."""
    return list(dict.fromkeys([path_topic, *(e.topic for e in entries if e.topic)]))
