"""What the client sends and receives: :class:`Message` out, :class:`SendResult` and
:class:`ReceivedMessage` back. Plain frozen values with their JSON (the HTTP API's) in one place.

Timestamps are milliseconds since the epoch; offsets are ConsumeQueue offsets (a queue's
``max_offset`` is the next to be written, a group's committed offset the next to consume).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkmq.client.errors import InvalidArgument


@dataclass(frozen=True)
class Message:
    """One message to produce. ``body`` as ``str`` is sent as UTF-8 text, as ``bytes`` as base64.

    Queue choice: ``queue_id`` pins the queue; ``sharding_key`` maps the same key to the same
    queue over the whole topic (RocketMQ's ``SelectMessageQueueByHash``); with neither, the
    client spreads messages round robin over the live brokers' queues. At most one of
    ``delay_level``, ``delay_ms`` and ``deliver_at_ms``."""

    body: str | bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    sharding_key: str | None = None
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at_ms: int | None = None
    #: ``{"producer_group": ...}`` makes it a transactional half message (docs/transactions.md).
    transaction: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.body, str | bytes):
            raise InvalidArgument(f"body must be str or bytes, got {type(self.body).__name__}")
        if isinstance(self.keys, str):
            raise InvalidArgument("keys is a sequence of keys; wrap a single key in a tuple")
        if self.queue_id is not None and self.queue_id < 0:
            raise InvalidArgument(f"queue_id must be >= 0, got {self.queue_id}")

    def to_entry(self) -> dict[str, Any]:
        """The produce entry of the HTTP API (fields left unset are omitted)."""
        entry: dict[str, Any] = (
            {"body": self.body}
            if isinstance(self.body, str)
            else {"body_base64": base64.b64encode(self.body).decode("ascii")}
        )
        optional: dict[str, Any] = {
            "tags": self.tags,
            "keys": list(self.keys) or None,
            "properties": dict(self.properties) or None,
            "queue_id": self.queue_id,
            "sharding_key": self.sharding_key,
            "delay_level": self.delay_level,
            "delay_ms": self.delay_ms,
            "deliver_at_ms": self.deliver_at_ms,
            "transaction": dict(self.transaction) if self.transaction is not None else None,
        }
        entry.update({name: value for name, value in optional.items() if value is not None})
        return entry


@dataclass(frozen=True)
class SendResult:
    """Where a message was stored: ``broker`` (``"local"`` for a lone broker), queue and offset."""

    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    uniq_key: str | None
    broker: str | None
    commitlog_offset: int | None = None
    store_timestamp: int | None = None
    #: The broker's JSON answer as it came (transactions add ``transaction_id`` and the like).
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @staticmethod
    def from_json(document: Mapping[str, Any], broker: str | None = None) -> SendResult:
        return SendResult(
            topic=str(document.get("topic", "")),
            queue_id=int(document["queue_id"]),
            queue_offset=int(document["queue_offset"]),
            msg_id=str(document["msg_id"]),
            uniq_key=document.get("uniq_key"),
            broker=document.get("broker") or broker,
            commitlog_offset=document.get("commitlog_offset"),
            store_timestamp=document.get("store_timestamp"),
            raw={**document, "broker": document.get("broker") or broker},
        )


@dataclass(frozen=True)
class ReceivedMessage:
    """One pulled message. ``body`` is the raw bytes; ``text`` the body as UTF-8 when it is."""

    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str
    uniq_key: str | None
    tags: str | None
    keys: tuple[str, ...]
    body: bytes
    properties: Mapping[str, str]
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    #: The broker name the message was pulled from.
    broker: str | None
    #: The pull answer's JSON object for this message, as it came.
    raw: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def text(self) -> str | None:
        return self.raw.get("body")

    @staticmethod
    def from_json(document: Mapping[str, Any], broker: str | None) -> ReceivedMessage:
        text = document.get("body")
        encoded = document.get("body_base64") or ""
        body = text.encode("utf-8") if text is not None else base64.b64decode(encoded)
        return ReceivedMessage(
            topic=str(document["topic"]),
            queue_id=int(document["queue_id"]),
            queue_offset=int(document["queue_offset"]),
            msg_id=str(document["msg_id"]),
            uniq_key=document.get("uniq_key"),
            tags=document.get("tags"),
            keys=tuple(document.get("keys") or ()),
            body=body,
            properties=dict(document.get("properties") or {}),
            born_timestamp=int(document.get("born_timestamp", 0)),
            store_timestamp=int(document.get("store_timestamp", 0)),
            reconsume_times=int(document.get("reconsume_times", 0)),
            broker=broker,
            raw=document,
        )


@dataclass(frozen=True)
class PullResult:
    """One pull of one queue: the messages, and where the next pull starts."""

    status: str
    messages: tuple[ReceivedMessage, ...]
    next_offset: int
    min_offset: int
    max_offset: int
    broker: str | None

    @staticmethod
    def from_json(document: Mapping[str, Any], broker: str | None) -> PullResult:
        return PullResult(
            status=str(document.get("status", "")),
            messages=tuple(ReceivedMessage.from_json(m, broker) for m in document.get("messages", ())),
            next_offset=int(document["next_offset"]),
            min_offset=int(document.get("min_offset", 0)),
            max_offset=int(document.get("max_offset", 0)),
            broker=broker,
        )


@dataclass(frozen=True)
class QueueOffsets:
    """A queue's bounds as its owner reports them (``None`` while the owner is unreachable)."""

    queue_id: int
    broker: str
    alive: bool
    min_offset: int | None
    max_offset: int | None

    @property
    def messages(self) -> int | None:
        if self.min_offset is None or self.max_offset is None:
            return None
        return self.max_offset - self.min_offset
