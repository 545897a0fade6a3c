"""Turning validated produce requests into store writes.

The ``put_*`` functions block on the store and run in worker threads; the rest is pure or
in-memory. This module checks what the HTTP contract reports with an entry index (queue ids
against the topic, scheduling fields, body sizes) and hands the rest to the store: batches go
to its one columnar entry, ``MessageStore.put_columns``, which resolves queues (explicit,
sharding key, round robin) and stores all or nothing; a single message, a batch across topics
and transaction halves go through ``put_messages``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker.errors import BrokerError
from broker.produce import (
    place_message,
    request_ref,
    scheduling,
    too_large,
    unknown_queue,
)
from ingest_api.http.batches import ARROW_COLUMNS, ArrowBatch, check_body_sizes
from ingest_api.http.fields import decode_body
from ingest_api.http.json_batch import EntryFields
from ingest_api.http.schemas import ProduceIn, entry_topic
from ingest_api.params import IDEMPOTENCY_KEY_PATTERN, MAX_IDEMPOTENCY_KEY_CHARS
from store import (
    PROPERTY_PGROUP,
    PROPERTY_TRANSACTION_ID,
    UNPLACED,
    Message,
    MessageStore,
    ProduceColumns,
    ProduceOutcome,
    ProducerRef,
    PutResult,
    request_uniq_keys,
)
from store.publish import TransactionService

_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def idempotency_ref(topic: str, key: str | None) -> ProducerRef | None:
    """The store request identity for an ``Idempotency-Key`` header (None without one).

    A retried request with the same key (and topic) returns the original results instead of
    writing again, also after a broker restart (see :mod:`store.write.idempotence`)."""
    if key is None:
        return None
    if _IDEMPOTENCY_KEY.fullmatch(key) is None:
        raise BrokerError(
            400,
            "invalid_idempotency_key",
            f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} visible ASCII characters",
        )
    return request_ref(f"http:{topic}:{key}")


def entry_scheduling(
    entry: EntryFields, max_delay_ms: int, now_ms: int, index: int | None
) -> tuple[int, dict[str, str]]:
    """:func:`scheduling` of an entry's three scheduling fields."""
    return scheduling(
        entry.delay_level,
        entry.deliver_at_ms,
        entry.delay_ms,
        max_delay_ms=max_delay_ms,
        now_ms=now_ms,
        index=index,
    )


def entry_message(
    topic: str,
    entry: ProduceIn,
    queue_count: int,
    max_body: int,
    index: int | None,
    max_delay_ms: int,
    now_ms: int,
) -> Message:
    """The store message for a validated entry (:func:`broker.produce.place_message`)."""
    return place_message(
        topic,
        decode_body(entry.body, entry.body_base64),
        tags=entry.tags,
        keys=entry.keys,
        properties=entry.properties,
        queue_id=entry.queue_id,
        sharding_key=entry.sharding_key,
        delay_level=entry.delay_level,
        deliver_at_ms=entry.deliver_at_ms,
        delay_ms=entry.delay_ms,
        queue_count=queue_count,
        max_body=max_body,
        max_delay_ms=max_delay_ms,
        now_ms=now_ms,
        index=index,
    )


def put_entries(
    store: MessageStore,
    topic: str,
    entries: Sequence[ProduceIn],
    producer: ProducerRef | None = None,
) -> tuple[ProduceOutcome, int]:
    """Every entry is checked before anything is stored; returns (outcome, body bytes).

    Entries of the path's topic go to the store's columnar entry (``put_columns``) as columns,
    without a :class:`Message` per entry; a batch whose entries name other topics goes through
    :func:`entry_message` and ``put_messages`` (one append across topics)."""
    if any(entry_topic(e, topic) != topic for e in entries):
        store.ensure_topic(topic)
        max_body = store.config.max_message_size_bytes
        max_delay = store.config.timer_max_delay_ms
        counts = {t: store.ensure_topic(t) for t in entry_topics(topic, entries)}
        now = store.now_ms()
        messages = [
            entry_message(target, e, counts[target], max_body, i, max_delay, now)
            for i, (e, target) in enumerate((e, entry_topic(e, topic)) for e in entries)
        ]
        return list(store.put_messages(messages, producer=producer)), sum(len(m.body) for m in messages)
    return put_fields(store, topic, entries, None, producer)


def put_fields(
    store: MessageStore,
    topic: str,
    entries: Sequence[EntryFields],
    bodies: list[bytes] | None,
    producer: ProducerRef | None = None,
) -> tuple[ProduceOutcome, int]:
    """Validated entries of ``topic`` (``ProduceIn`` models, or :mod:`ingest_api.http.json_batch`'s
    entries with their ``bodies`` already decoded) through ``put_columns``. Returns (outcome,
    body bytes)."""
    queue_count = store.ensure_topic(topic)
    config = store.config
    columns = entry_columns(
        entries,
        queue_count,
        config.max_message_size_bytes,
        config.timer_max_delay_ms,
        topic,
        store.now_ms(),
        bodies,
    )
    return store.put_columns(topic, columns, producer=producer), sum(map(len, columns.bodies))


def entry_columns(
    entries: Sequence[EntryFields],
    queue_count: int,
    max_body: int,
    max_delay_ms: int,
    topic: str,
    now_ms: int,
    bodies: list[bytes] | None = None,
) -> ProduceColumns:
    """The store columns of validated entries of one topic: queue ids checked against the
    topic, scheduling fields checked against ``now_ms`` (400 naming the field and entry), body
    sizes checked (413).
    ``bodies`` are the entries' decoded bodies when the caller has them already."""
    if bodies is None:
        bodies = [decode_body(e.body, e.body_base64) for e in entries]
    n = len(entries)
    if n and max(map(len, bodies)) > max_body:
        index = next(i for i, body in enumerate(bodies) if len(body) > max_body)
        raise too_large(len(bodies[index]), max_body, index)
    explicit = [e.queue_id for e in entries]
    queue_ids = None
    if explicit.count(None) != n:
        queue_ids = np.array([UNPLACED if q is None else q for q in explicit], np.int32)
        bad = np.flatnonzero(queue_ids >= queue_count)
        if len(bad):
            raise unknown_queue(int(queue_ids[bad[0]]), topic, queue_count, int(bad[0]))
    properties: dict[str, list[str | None]] = {}
    levels = [0] * n
    special = [
        i
        for i, e in enumerate(entries)
        if e.properties or e.delay_level is not None or e.deliver_at_ms is not None or e.delay_ms is not None
    ]
    for i in special:
        entry = entries[i]
        merged = entry.properties
        if entry.scheduled:
            _, timer = entry_scheduling(entry, max_delay_ms, now_ms, i)
            merged = {**merged, **timer}
            levels[i] = entry.delay_level or 0
        for name, value in merged.items():
            properties.setdefault(name, [None] * n)[i] = value
    sharding = [e.sharding_key for e in entries]
    tags = [e.tags for e in entries]
    keys = [" ".join(k) if (k := e.keys) else None for e in entries]
    return ProduceColumns(
        bodies=bodies,
        queue_ids=queue_ids,
        sharding_keys=sharding if sharding.count(None) != n else None,
        tags=tags if tags.count(None) != n else None,
        keys=keys if keys.count(None) != n else None,
        properties={name: properties[name] for name in sorted(properties)} or None,
        delay_levels=np.array(levels, np.int32) if any(levels) else None,
    )


def check_arrow_queue_ids(topic: str, batch: ArrowBatch, queue_count: int) -> None:
    """400 naming the first row whose explicit queue is outside the topic."""
    if batch.queue_id is None:
        return
    explicit = pc.fill_null(batch.queue_id, -1).to_numpy(zero_copy_only=False)
    too_big = np.flatnonzero(explicit >= queue_count)
    if len(too_big):
        row = int(too_big[0])
        raise unknown_queue(int(explicit[row]), topic, queue_count, row)


def check_arrow_schedules(batch: ArrowBatch, max_delay_ms: int, now_ms: int) -> None:
    """The scheduling checks of :func:`scheduling` on every row that sets a scheduling column."""
    columns = (batch.delay_level, batch.deliver_at_ms, batch.delay_ms)
    given = [c for c in columns if c is not None and c.null_count < len(batch)]
    if not given:
        return
    mask = np.zeros(len(batch), dtype=np.bool_)
    for column in given:
        mask |= np.asarray(column.is_valid().to_numpy(zero_copy_only=False))
    rows = np.flatnonzero(mask).tolist()
    values = [None if c is None else c.to_pylist() for c in columns]
    for row in rows:
        level, at, delay = (None if v is None else v[row] for v in values)
        scheduling(level, at, delay, max_delay_ms=max_delay_ms, index=row, now_ms=now_ms)


def put_arrow(
    store: MessageStore, topic: str, batch: ArrowBatch, producer: ProducerRef | None = None
) -> tuple[ProduceOutcome, int]:
    """A validated Arrow batch through the store's columnar entry. Returns (outcome, body bytes)."""
    queue_count = store.ensure_topic(topic)
    sizes = pc.binary_length(batch.body)
    check_body_sizes(sizes, store.config.max_message_size_bytes)
    check_arrow_queue_ids(topic, batch, queue_count)
    check_arrow_schedules(batch, store.config.timer_max_delay_ms, store.now_ms())
    table = pa.table({name: column for name in ARROW_COLUMNS if (column := getattr(batch, name)) is not None})
    columns = ProduceColumns.from_arrow(table)
    return store.put_columns(topic, columns, producer=producer), int(pc.sum(sizes).as_py() or 0)


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
            raise BrokerError(
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
    now = store.now_ms()
    transaction_id = keys[0]
    for i, entry in enumerate(entries):
        target = entry_topic(entry, topic)
        if target not in counts:
            counts[target] = store.ensure_topic(target)
        message = entry_message(
            target, entry, counts[target], max_body, i, store.config.timer_max_delay_ms, now
        )
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
    """Store ``entries`` as the halves of one transaction and register it (worker thread).

    A keyed request (``Idempotency-Key``) is a transactional request of its own: the same key
    used before by a plain produce on the topic names another request, not this one (without
    this, the plain message's results came back and the transaction pointed at a message that
    is no half, so its commit failed with ``not_a_half_message``)."""
    if producer is not None:
        producer = request_ref(f"tx:{producer.producer_id}")
    transaction_id, messages = transaction_messages(store, topic, entries, producer_group, producer)
    results = store.put_messages(messages, producer=producer)
    born = results[0].store_timestamp_ms if results else 0
    transactions.register(transaction_id, producer_group, results, born, [m.topic for m in messages])
    return transaction_id, list(results)


def entry_topics(path_topic: str, entries: Sequence[ProduceIn]) -> list[str]:
    """The distinct topics a batch writes (its path topic first)."""
    return list(dict.fromkeys([path_topic, *(entry_topic(e, path_topic) for e in entries)]))
