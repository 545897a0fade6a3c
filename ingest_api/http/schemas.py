"""Request (``*In``) and response (``*Out``) bodies of the HTTP API.

Timestamps are integers in milliseconds since the Unix epoch. Message bodies travel as UTF-8
text (``body``) or base64 (``body_base64``); exactly one of the two is set on every message.

Length: about 480 lines of declarative models: the OpenAPI contract of every route in one
place (they share field types and validators).
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from store import (
    GROUP_MAX_LENGTH,
    NAME_PATTERN,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_TRANSACTION_ID,
    RETRY_TOPIC_MAX_LENGTH,
    SYSTEM_PROPERTIES,
    Message,
    MessageView,
    PutResult,
)

#: Property names the broker owns (RocketMQ's system properties); a producer may not send them.
RESERVED_PROPERTIES = SYSTEM_PROPERTIES | {PROPERTY_TRANSACTION_ID}
#: RocketMQ's property encoding separators; they cannot appear inside names or values.
_SEPARATORS = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)

NonEmpty = Annotated[str, Field(min_length=1, max_length=1024)]
Offset = Annotated[int, Field(ge=0, le=2**62)]
QueueId = Annotated[int, Field(ge=0, le=65535)]


def _check_text(what: str, text: str) -> None:
    if any(sep in text for sep in _SEPARATORS):
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


def decode_body(body: str | None, body_base64: str | None) -> bytes:
    """The message bytes from exactly one of ``body`` (UTF-8) and ``body_base64``."""
    if (body is None) == (body_base64 is None):
        raise ValueError("exactly one of 'body' and 'body_base64' must be given")
    if body is not None:
        return body.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(body_base64 or "", validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"body_base64 is not valid base64: {exc}") from None


class TransactionIn(BaseModel):
    """Makes a produce request a transaction (RocketMQ ``sendMessageInTransaction``)."""

    model_config = ConfigDict(extra="forbid")

    producer_group: str = Field(
        min_length=1,
        max_length=GROUP_MAX_LENGTH,
        pattern=f"^{NAME_PATTERN}$",
        description="Producer group; check-backs go to its check_url (PUT /producer-groups/{group}).",
    )
    commit: bool = Field(
        False,
        description="Commit the transaction in the same request, once its halves are stored (one "
        "request instead of two; the answer then names the committed messages).",
    )


class ProduceIn(BaseModel):
    """One message to produce. Without ``queue_id`` or ``sharding_key`` queues are used round robin."""

    model_config = ConfigDict(extra="forbid")

    body: str | None = Field(None, description="Message body as UTF-8 text.")
    body_base64: str | None = Field(None, description="Message body, base64-encoded (binary bodies).")
    tags: NonEmpty | None = Field(None, description="RocketMQ TAGS, used by tag filters on pull.")
    keys: list[NonEmpty] = Field(default_factory=list, max_length=64, description="Indexed keys.")
    properties: dict[str, str] = Field(default_factory=dict, description="User properties.")
    queue_id: QueueId | None = Field(None, description="Explicit queue; excludes sharding_key.")
    sharding_key: NonEmpty | None = Field(
        None, description="Messages with the same key go to the same queue (so their order holds)."
    )
    delay_level: int | None = Field(
        None,
        ge=-(2**31),
        lt=2**31,
        description="RocketMQ delay level: 0 = no delay, N waits the N-th time of the broker's level "
        "table (`--delay-levels`, default 1s 5s 10s 30s 1m ... 2h); above the table clamps to the "
        "last level. Excludes deliver_at_ms and delay_ms.",
    )
    deliver_at_ms: int | None = Field(
        None,
        ge=-(2**63),
        lt=2**63,
        description="Timer message (RocketMQ 5 TIMER_DELIVER_MS): deliver at this epoch millisecond, "
        "rounded up to the second; a time in the past delivers at once. At most the broker's "
        "`--timer-max-delay` ahead.",
    )
    delay_ms: int | None = Field(
        None,
        ge=-(2**63),
        lt=2**63,
        description="Timer message (TIMER_DELAY_MS): deliver this many milliseconds after the broker "
        "receives it, rounded up to the second.",
    )
    transaction: TransactionIn | None = Field(
        None,
        description="Store as a half message of a transaction: invisible until POST "
        "/transactions/{transaction_id} commits it. In a batch, every entry joins one transaction.",
    )
    topic: str | None = Field(
        None,
        min_length=1,
        max_length=RETRY_TOPIC_MAX_LENGTH,
        pattern=f"^{NAME_PATTERN}$",
        description="Batch entries only: write this entry to another topic than the path's (e.g. a "
        "transaction across topics).",
    )

    @model_validator(mode="after")
    def _check(self) -> ProduceIn:
        if (self.body is None) == (self.body_base64 is None):
            raise ValueError("exactly one of 'body' and 'body_base64' must be given")
        if self.queue_id is not None and self.sharding_key is not None:
            raise ValueError("give at most one of 'queue_id' and 'sharding_key'")
        check_message_fields(self.tags, self.keys, self.properties)
        if self.body is not None:
            try:
                self.body.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("body is not valid Unicode text; use body_base64") from None
        else:
            decode_body(None, self.body_base64)
        return self

    def to_message(
        self, topic: str, queue_id: int | None, delay_level: int = 0, schedule: dict[str, str] | None = None
    ) -> Message:
        """The store message; ``delay_level`` / ``schedule`` (timer properties) come from
        :func:`ingest_api.http.producing.scheduling`, which checks the three scheduling fields."""
        properties = dict(self.properties)
        if schedule:
            properties.update(schedule)
        return Message(
            topic=topic,
            body=decode_body(self.body, self.body_base64),
            tags=self.tags,
            keys=tuple(self.keys),
            properties=properties,
            queue_id=queue_id,
            delay_level=delay_level,
        )

    @property
    def scheduled(self) -> bool:
        """Whether a scheduling field is given (such entries are stored one by one)."""
        return self.delay_level is not None or self.deliver_at_ms is not None or self.delay_ms is not None


class ProduceBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[ProduceIn] = Field(min_length=1)
    transaction: TransactionIn | None = Field(
        None, description="All messages form one transaction (atomic commit, across topics too)."
    )


class ProduceOut(BaseModel):
    msg_id: str = Field(description="offsetMsgId: 32 hex chars (store host, port, CommitLog offset).")
    uniq_key: str = Field(description="Client-side unique id (RocketMQ UNIQ_KEY).")
    topic: str = Field(
        description="Topic written: SCHEDULE_TOPIC_XXXX for a delay level, rmq_sys_wheel_timer for a "
        "timer message due in the future (the delay resolver delivers them to their topic)."
    )
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_timestamp: int = Field(description="Milliseconds since the epoch.")

    @classmethod
    def of(cls, result: PutResult) -> ProduceOut:
        return cls(
            msg_id=result.msg_id,
            uniq_key=result.uniq_key,
            topic=result.topic,
            queue_id=result.queue_id,
            queue_offset=result.queue_offset,
            commitlog_offset=result.commitlog_offset,
            store_timestamp=result.store_timestamp_ms,
        )


class ProduceBatchOut(BaseModel):
    results: list[ProduceOut]


class TransactionalProduceOut(ProduceOut):
    transaction_id: str = Field(description="End it with POST /transactions/{transaction_id}.")


class TransactionalBatchOut(ProduceBatchOut):
    transaction_id: str = Field(description="End it with POST /transactions/{transaction_id}.")


class EndTransactionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: Literal["commit", "rollback"]
    producer_group: str = Field(min_length=1, max_length=GROUP_MAX_LENGTH)


class TransactionOut(BaseModel):
    transaction_id: str
    producer_group: str
    state: Literal["prepared", "committed", "rolled_back", "discarded"]
    topics: list[str]
    messages: int = Field(description="Half messages in the transaction.")
    born_timestamp: int
    age_ms: int
    check_times: int = Field(description="Check-backs decided so far (since this broker started).")
    last_check_timestamp: int | None


class EndTransactionOut(TransactionOut):
    ended_now: bool = Field(description="False when the transaction had ended already (first outcome kept).")
    results: list[ProduceOut] = Field(
        description="The committed messages (when committed by this broker process)."
    )


class TransactionListOut(BaseModel):
    transactions: list[TransactionOut]


class ProducerGroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    check_url: str = Field(
        min_length=1, max_length=2048, description="http(s) URL the broker POSTs checks to."
    )


class ProducerGroupOut(BaseModel):
    producer_group: str
    check_url: str
    registered_timestamp: int


class TopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queues: int = Field(ge=1, le=1024, description="Queue count; an existing topic only grows.")


class QueueOffsetsOut(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int = Field(description="Next offset to be written.")


class TopicOut(BaseModel):
    topic: str
    queues: int
    queue_offsets: list[QueueOffsetsOut] | None = None


class TopicListOut(BaseModel):
    topics: list[TopicOut]


class MessageOut(BaseModel):
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    uniq_key: str | None
    tags: str | None
    keys: list[str]
    body: str | None = Field(description="Body as text when it is valid UTF-8, else null.")
    body_base64: str | None = Field(description="Body in base64 when it is not valid UTF-8, else null.")
    properties: dict[str, str]
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int

    @classmethod
    def of(cls, view: MessageView) -> MessageOut:
        text, encoded = body_fields(view.body)
        user_properties = {k: v for k, v in view.properties.items() if k not in ("TAGS", "KEYS", "UNIQ_KEY")}
        return cls(
            topic=view.topic,
            queue_id=view.queue_id,
            queue_offset=view.queue_offset,
            commitlog_offset=view.commitlog_offset,
            msg_id=view.msg_id,
            uniq_key=view.uniq_key,
            tags=view.tags,
            keys=view.keys,
            body=text,
            body_base64=encoded,
            properties=user_properties,
            born_timestamp=view.born_timestamp_ms,
            store_timestamp=view.store_timestamp_ms,
            reconsume_times=view.reconsume_times,
        )


def body_fields(body: bytes) -> tuple[str | None, str | None]:
    """(``body``, ``body_base64``) of a message: text when it is valid UTF-8, else base64."""
    try:
        return body.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, base64.b64encode(body).decode("ascii")


class PullOut(BaseModel):
    status: str = Field(description="Store GetStatus, e.g. FOUND, NO_NEW_MESSAGE, OFFSET_TOO_SMALL.")
    messages: list[MessageOut]
    next_offset: int = Field(description="Offset to pull from next.")
    min_offset: int
    max_offset: int


class QueryOut(BaseModel):
    messages: list[MessageOut]


class OffsetOut(BaseModel):
    topic: str
    queue_id: int
    timestamp_ms: int
    boundary: Literal["lower", "upper"]
    offset: int


class GroupOffsetsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: NonEmpty
    offsets: dict[QueueId, Offset] = Field(
        min_length=1, description='Queue id (as a string key) -> next offset to consume, e.g. {"0": 12}.'
    )


class GroupOffsetsOut(BaseModel):
    group: str
    topic: str
    offsets: dict[int, int] = Field(description="Queue id -> committed next offset (-1: none).")


class GroupResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: NonEmpty
    timestamp_ms: int | None = Field(
        None, ge=0, le=2**62, description="Reset to the first offset at/after T."
    )
    to: Literal["earliest", "latest", "shift"] | None = Field(
        None, description="earliest / latest offset, or shift: the committed offset plus shift_by."
    )
    shift_by: int | None = Field(
        None, ge=-(2**62), le=2**62, description="With to=shift: messages to skip (negative: re-read)."
    )
    queue_id: QueueId | None = Field(None, description="Reset only this queue (default: every queue).")
    dry_run: bool = Field(False, description="Answer the plan without committing anything.")

    @model_validator(mode="after")
    def _check(self) -> GroupResetIn:
        if (self.timestamp_ms is None) == (self.to is None):
            raise ValueError("give exactly one of 'timestamp_ms' and 'to'")
        if (self.to == "shift") != (self.shift_by is not None):
            raise ValueError("'shift_by' goes with to=shift, and to=shift needs it")
        return self


class ResetQueueOut(BaseModel):
    queue_id: int
    current: int = Field(description="Committed offset before the reset (-1: never committed).")
    target: int = Field(description="Offset the reset commits (clamped to [min_offset, max_offset]).")
    change: int = Field(description="target - current (current = min_offset when never committed).")
    min_offset: int
    max_offset: int


class GroupResetOut(BaseModel):
    group: str
    topic: str
    dry_run: bool
    offsets: dict[int, int] = Field(description="Queue id -> the offset committed (or, dry run, to commit).")
    queues: list[ResetQueueOut]


class GroupQueueOut(BaseModel):
    topic: str
    queue_id: int
    committed_offset: int = Field(description="-1 when the group never committed on this queue.")
    max_offset: int
    lag: int
    lag_seconds: float | None = Field(description="Age of the oldest unconsumed message; null: caught up.")


class KafkaMemberOut(BaseModel):
    member_id: str
    client_id: str
    client_host: str


class GroupDescribeOut(BaseModel):
    group: str
    kind: Literal["kafka", "offset table"]
    kafka_state: str | None = Field(description="Kafka coordinator state (kafka groups only).")
    members: list[KafkaMemberOut]
    queues: list[GroupQueueOut]
    total_lag: int


class StatsOut(BaseModel):
    version: str
    topics: int
    groups: int
    messages_put: int = Field(description="Messages appended since the broker started.")
    bytes_put: int
    commitlog_min_offset: int
    commitlog_max_offset: int
    commitlog_flushed_offset: int
    index_dispatch_lag_bytes: int
    messages_in: dict[str, float] = Field(description="Door (http, kafka, sink) -> messages stored.")
    messages_out: dict[str, float] = Field(description="Door -> messages handed to consumers.")


class QueueLagOut(BaseModel):
    queue_id: int
    committed_offset: int = Field(description="-1 when the group never committed on this queue.")
    max_offset: int
    lag: int


class GroupLagOut(BaseModel):
    group: str
    topic: str
    queues: list[QueueLagOut]
    total_lag: int


class GroupListOut(BaseModel):
    groups: dict[str, list[str]] = Field(description="Group -> topics it has offsets for.")


class HealthOut(BaseModel):
    status: Literal["ok"]


class ErrorOut(BaseModel):
    error: str = Field(description="Stable machine-readable code.")
    message: str
