"""Producing below the doors: the rules a message meets before the store takes it, and the one
single-message put every door calls.

A door decodes its request into message fields (HTTP: JSON, NDJSON, Arrow; the console: a form;
RocketMQ's doors: their headers) and calls :func:`place_message`, which applies the broker's
rules once: the queue (explicit and checked against the topic, or by sharding key), the
scheduling fields (a delay level, or a timer due at or after a time, at most
``--timer-max-delay`` ahead), the body size. :func:`produce_message` then stores it: coalesced
with concurrent single produces into one append (:mod:`broker.coalescer`), or on its own when it
is an idempotent request (:class:`store.ProducerRef`: a retry returns the original result, across
restarts too). Batches go to the store's columnar entry (``MessageStore.put_columns``) through the
door's own decoding; the checks they report per entry are the ones here.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping, Sequence

from broker.errors import BrokerError
from broker.state import Broker
from broker.threads import run_blocking
from store import (
    MAX_PRODUCER_ID_CHARS,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_ID,
    SYSTEM_PROPERTIES,
    Message,
    MessageStore,
    ProducerRef,
    PutResult,
    sharding_queue,
    validate_topic,
)

#: Property names a producer may not set: the broker's own (TAGS, KEYS, UNIQ_KEY, ...).
RESERVED_PROPERTIES = SYSTEM_PROPERTIES | {PROPERTY_TRANSACTION_ID}
#: The CommitLog property encoding's separators, which no tag, key or property may contain.
SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)


def _check_text(what: str, text: str) -> None:
    if any(sep in text for sep in SEPARATORS):
        raise ValueError(f"{what} must not contain the control characters \\x01 or \\x02")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not valid Unicode text (lone surrogate)") from None


def check_message_fields(tags: str | None, keys: list[str], properties: dict[str, str]) -> None:
    """Refuse tags, keys and properties the CommitLog property encoding cannot carry."""
    if tags is not None:
        _check_text("tags", tags)
        if "||" in tags:
            raise ValueError("tags must not contain '||' (the tag expression separator)")
        if tags != tags.strip():  # a tag expression strips its tags: such a tag never matches
            raise ValueError("tags must not start or end with whitespace")
    for key in keys:
        _check_text("keys", key)
        if any(ch.isspace() for ch in key):
            raise ValueError(f"key {key!r} contains whitespace (keys are stored space-separated)")
    for name, value in properties.items():
        if not name:
            raise ValueError("property names must not be empty")
        _check_text(f"property {name!r}", name)
        _check_text(f"property {name!r} value", value)
        if name in RESERVED_PROPERTIES:
            raise ValueError(f"property {name!r} is reserved for the broker")


def request_ref(name: str) -> ProducerRef:
    """The store's identity of the request ``name``. The store takes names of at most
    ``MAX_PRODUCER_ID_CHARS``; a longer one (a long topic and a long key) is replaced by its
    digest: such names were refused before, so no stored request used them, and shorter ones
    keep their identity (and their messages' UNIQ_KEYs) across this change."""
    if len(name) > MAX_PRODUCER_ID_CHARS:
        name = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
    return ProducerRef(name)


def known_queue_count(store: MessageStore, topic: str) -> int | None:
    """Queue count of an existing topic, None when it does not exist. Never blocks on I/O, so
    the event loop may call it."""
    validate_topic(topic)
    return store.queue_count(topic) if store.has_topic(topic) else None


def unknown_queue(queue_id: int, topic: str, queue_count: int, index: int | None = None) -> BrokerError:
    """409: a queue id outside the topic (well formed, but the topic has fewer queues; it may grow)."""
    where = f"messages[{index}]: " if index is not None else ""
    return BrokerError(
        409,
        "unknown_queue",
        f"{where}queue_id {queue_id} is outside topic {topic!r}'s {queue_count} queues",
        index=index,
    )


def too_large(size: int, limit: int, index: int | None = None) -> BrokerError:
    """413: a body over the store's ``max_message_size_bytes``."""
    where = f"messages[{index}]: " if index is not None else ""
    return BrokerError(
        413, "message_too_large", f"{where}body is {size} bytes; the limit is {limit}", index=index
    )


def schedule_error(message: str, field: str, index: int | None) -> BrokerError:
    """A 400 for a refused delay_level / deliver_at_ms / delay_ms, naming the field (and entry)."""
    where = f"messages[{index}]: " if index is not None else ""
    return BrokerError(400, "invalid_schedule", f"{where}{message}", field=field, index=index)


def scheduling(
    delay_level: int | None,
    deliver_at_ms: int | None,
    delay_ms: int | None,
    *,
    max_delay_ms: int,
    now_ms: int,
    index: int | None = None,
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
    if delay_ms is not None:
        field, wait, prop = "delay_ms", delay_ms, {PROPERTY_TIMER_DELAY_MS: str(delay_ms)}
        if delay_ms < 0:
            raise schedule_error(f"delay_ms must be >= 0, got {delay_ms}", field, index)
    else:
        assert deliver_at_ms is not None
        field, wait, prop = (
            "deliver_at_ms",
            deliver_at_ms - now_ms,
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


def place_message(
    topic: str,
    body: bytes,
    *,
    tags: str | None = None,
    keys: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    queue_id: int | None = None,
    sharding_key: str | None = None,
    delay_level: int | None = None,
    deliver_at_ms: int | None = None,
    delay_ms: int | None = None,
    queue_count: int,
    max_body: int,
    max_delay_ms: int,
    now_ms: int,
    index: int | None = None,
) -> Message:
    """The store message for decoded fields: the queue resolved (an explicit one checked against
    ``queue_count``, a sharding key's by the sharding rule), the scheduling fields checked
    against ``now_ms`` (the store's clock), the body size checked. Raises :class:`BrokerError`
    naming the field (and ``index``, the entry of a batch)."""
    if queue_id is not None and queue_id >= queue_count:
        raise unknown_queue(queue_id, topic, queue_count, index)
    if sharding_key is not None:
        queue_id = sharding_queue(sharding_key, queue_count)
    level, schedule = scheduling(
        delay_level, deliver_at_ms, delay_ms, max_delay_ms=max_delay_ms, now_ms=now_ms, index=index
    )
    merged = dict(properties or {})
    if schedule:
        merged.update(schedule)
    message = Message(
        topic=topic,
        body=body,
        tags=tags,
        keys=tuple(keys),
        properties=merged,
        queue_id=queue_id,
        delay_level=level,
    )
    if len(message.body) > max_body:
        raise too_large(len(message.body), max_body, index)
    return message


async def topic_queue_count(broker: Broker, topic: str) -> int:
    """The topic's queue count, creating the topic (auto-create) when it does not exist."""
    count = known_queue_count(broker.store, topic)
    if count is None:
        count = await run_blocking(broker.store.ensure_topic, topic)
    return count


async def produce_message(
    broker: Broker, message: Message, producer: ProducerRef | None = None, *, started: float | None = None
) -> PutResult:
    """Store one placed message on this broker and count it (``started``: when the request
    arrived, ``time.perf_counter()``). Without ``producer`` it joins the group commit of
    concurrent single produces; with one it is its own idempotent request."""
    begun = time.perf_counter() if started is None else started
    if producer is None:
        result = await broker.producer.put(message)
    else:  # not coalesced: the request is its own idempotent unit
        (result,) = await run_blocking(broker.store.put_messages, [message], producer=producer)
    broker.metrics.produced(message.topic, 1, len(message.body), "single", time.perf_counter() - begun)
    return result
