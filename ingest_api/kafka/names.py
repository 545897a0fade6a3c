"""Kafka names <-> store names, and a store view that speaks Kafka names.

Kafka topic names may contain ``.`` and group ids almost anything; store names are limited to
``[%|a-zA-Z0-9_-]`` (they become directory names and ``topic@group`` keys). The mapping is
percent-encoding, applied only when needed so ordinary names are untouched:

* :func:`to_store`: a name the store accepts (and that holds no ``%XX`` sequence) is kept as
  is; any other name has every character outside ``[|a-zA-Z0-9_-]`` (``%`` included)
  replaced by ``%XX`` per UTF-8 byte: Kafka topic ``orders.v1`` is store topic ``orders%2Ev1``.
* :func:`from_store`: the inverse, applied only when it is exact (``to_store(decoded) ==
  name``), so store-native names such as ``%RETRY%group`` read back unchanged.

Kafka topic names never contain ``%``, so no two Kafka names map to one store name. HTTP and
Spark users address such a topic or group by its store name (``orders%2Ev1``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from broker.offsets import commit_offsets
from ingest_api.kafka.store_port import KafkaStore
from store import (
    NAME_CHARS,
    NAME_PATTERN,
    BatchReadResult,
    Boundary,
    Message,
    MessageView,
    ProduceColumns,
    ProduceOutcome,
    ProducerRef,
    PutResult,
)
from store.publish import HalfOf

_STORE_NAME = re.compile(NAME_PATTERN)
_KEPT = NAME_CHARS - {"%"}  # "%" starts an escape
_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-F]{2})")

ArrivalListener = Callable[[str, int, int], None]


def to_store(name: str) -> str:
    """The store name of a Kafka topic or group id."""
    if not name or (_STORE_NAME.fullmatch(name) and not _ESCAPE.search(name)):
        return name
    return "".join(ch if ch in _KEPT else "".join(f"%{b:02X}" for b in ch.encode("utf-8")) for ch in name)


def from_store(name: str) -> str:
    """The Kafka name of a store topic or group (exact inverse of :func:`to_store`)."""
    if "%" not in name or _STRAY_PERCENT.search(name):
        return name
    try:
        decoded = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name).encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return name
    return decoded if to_store(decoded) == name else name


class KafkaNamedStore:
    """A :class:`KafkaStore` whose topic and group arguments and results are Kafka names."""

    def __init__(self, store: KafkaStore) -> None:
        self._store = store
        self._listeners: dict[ArrivalListener, ArrivalListener] = {}

    @property
    def inner(self) -> KafkaStore:
        return self._store

    @property
    def config(self) -> Any:
        return self._store.config

    def topics(self) -> dict[str, int]:
        return {from_store(name): count for name, count in self._store.topics().items()}

    def has_topic(self, topic: str) -> bool:
        return self._store.has_topic(to_store(topic))

    def queue_count(self, topic: str) -> int:
        return self._store.queue_count(to_store(topic))

    def create_topic(self, topic: str, queues: int | None = None) -> int:
        return self._store.create_topic(to_store(topic), queues)

    def delete_topic(self, topic: str) -> bool:
        return self._store.delete_topic(to_store(topic))

    def put_messages(
        self, messages: Sequence[Message], *, producer: ProducerRef | None = None
    ) -> list[PutResult]:
        renamed = [replace(m, topic=to_store(m.topic)) for m in messages]
        return self._store.put_messages(renamed, producer=producer)

    def put_columns(
        self, topic: str, columns: ProduceColumns, *, producer: ProducerRef | None = None
    ) -> ProduceOutcome:
        return self._store.put_columns(to_store(topic), columns, producer=producer)

    def now_ms(self) -> int:
        return self._store.now_ms()

    def put_halves(
        self, topic: str, columns: ProduceColumns, *, transaction: HalfOf, producer: ProducerRef | None = None
    ) -> ProduceOutcome:
        return self._store.put_halves(to_store(topic), columns, transaction=transaction, producer=producer)

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult:
        return self._store.read_batch(
            to_store(topic),
            queue_id,
            offset,
            max_messages,
            tag_expression=tag_expression,
            end_offset=end_offset,
        )

    def get_by_uniq_key(self, topic: str, uniq_key: str) -> MessageView | None:
        return self._store.get_by_uniq_key(to_store(topic), uniq_key)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._store.min_offset(to_store(topic), queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._store.max_offset(to_store(topic), queue_id)

    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int:
        return self._store.offset_for_timestamp(to_store(topic), queue_id, timestamp_ms, boundary)

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        def translated(topic: str, queue_id: int, max_offset: int) -> None:
            listener(from_store(topic), queue_id, max_offset)

        self._listeners[listener] = translated
        self._store.add_arrival_listener(translated)

    def remove_arrival_listener(self, listener: ArrivalListener) -> None:
        translated = self._listeners.pop(listener, None)
        if translated is not None:
            self._store.remove_arrival_listener(translated)

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None:
        """Through the core's one offset commit (a POP group is refused: group_kind_conflict)."""
        commit_offsets(self._store, to_store(group), to_store(topic), offsets)

    def committed_offsets(self, group: str, topic: str) -> dict[int, int]:
        return self._store.committed_offsets(to_store(group), to_store(topic))

    def groups(self) -> dict[str, list[str]]:
        return {
            from_store(group): [from_store(topic) for topic in topics]
            for group, topics in self._store.groups().items()
        }
