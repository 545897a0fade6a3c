"""Bodies of producing, transactions, topics and messages (pull, query, offsets)."""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from broker.produce import check_message_fields
from broker.transactions import CHECK_URL_PATTERN
from cluster import BROKER_NAME_PATTERN
from ingest_api.http.fields import (
    BASE64_PATTERN,
    PROPERTIES_SCHEMA,
    Flag,
    GroupName,
    Int32,
    Int64,
    Key,
    NonEmpty,
    QueueCount,
    QueueId,
    Tags,
    TopicName,
    config_limit,
    decode_body,
)
from ingest_api.http.schema_rules import AtMostOne, ExactlyOne, Excludes, check, given, schema_of
from store import GROUP_MAX_LENGTH, Message, MessageView, PutResult


class TransactionIn(BaseModel):
    """Makes a produce request a transaction (RocketMQ ``sendMessageInTransaction``)."""

    model_config = ConfigDict(extra="forbid")

    producer_group: GroupName = Field(
        description="Producer group; check-backs go to its check_url (PUT /producer-groups/{group}).",
    )
    commit: Flag = Field(
        False,
        description="Commit the transaction in the same request, once its halves are stored (one "
        "request instead of two; the answer then names the committed messages).",
    )


#: Checked by the model (422).
_PRODUCE_RULES = (ExactlyOne("body", "body_base64"), AtMostOne("queue_id", "sharding_key"))
#: Checked while producing with their own codes: 400 ``invalid_schedule`` and
#: ``invalid_transaction`` (:func:`broker.produce.scheduling`, ``put_transaction``).
_SCHEDULING = ("delay_level", "deliver_at_ms", "delay_ms")
_PRODUCE_RULES_CHECKED_WHEN_PRODUCING = (AtMostOne(*_SCHEDULING), Excludes("transaction", _SCHEDULING))


class ProduceIn(BaseModel):
    """One message to produce. Without ``queue_id`` or ``sharding_key`` queues are used round robin."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra=schema_of(_PRODUCE_RULES + _PRODUCE_RULES_CHECKED_WHEN_PRODUCING)
    )

    body: str | None = Field(
        None,
        description="Message body as UTF-8 text; at most the broker's message size in UTF-8 bytes (413).",
        json_schema_extra=config_limit(maxLength="max_message_bytes"),
    )
    body_base64: str | None = Field(
        None,
        description="Message body, base64-encoded (binary bodies); at most the broker's message size "
        "once decoded (413).",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )
    tags: Tags | None = None
    keys: list[Key] = Field(default_factory=list, max_length=64, description="Indexed keys.")
    properties: dict[str, str] = Field(
        default_factory=dict,
        description="User properties (broker-owned names such as TAGS, KEYS, UNIQ_KEY are refused); "
        "at most 32 KiB once encoded with the tags and keys (413).",
        json_schema_extra=PROPERTIES_SCHEMA,
    )
    queue_id: QueueId | None = Field(
        None,
        description="Explicit queue; excludes sharding_key. 409 unknown_queue beyond the topic's queues.",
    )
    sharding_key: NonEmpty | None = Field(
        None, description="Messages with the same key go to the same queue (so their order holds)."
    )
    # The scheduling fields keep the int32 / int64 range in the model: a negative value is
    # refused by broker.produce.scheduling as a 400 naming the field, which the document states.
    delay_level: Int32 | None = Field(
        None,
        json_schema_extra={"minimum": 0},
        description="RocketMQ delay level: 0 = no delay, N waits the N-th time of the broker's level "
        "table (`--delay-levels`, default 1s 5s 10s 30s 1m ... 2h); above the table clamps to the "
        "last level. Excludes deliver_at_ms and delay_ms.",
    )
    deliver_at_ms: Int64 | None = Field(
        None,
        json_schema_extra={"minimum": 0},
        description="Timer message (RocketMQ 5 TIMER_DELIVER_MS): deliver at this epoch millisecond, "
        "rounded up to the second; a time in the past delivers at once. At most the broker's "
        "`--timer-max-delay` ahead of its clock (400 invalid_schedule), a bound relative to the "
        "time of the request that JSON Schema cannot state.",
    )
    delay_ms: Int64 | None = Field(
        None,
        json_schema_extra={"minimum": 0, **config_limit(maximum="timer_max_delay_ms")},
        description="Timer message (TIMER_DELAY_MS): deliver this many milliseconds after the broker "
        "receives it, rounded up to the second; at most the broker's `--timer-max-delay`.",
    )
    transaction: TransactionIn | None = Field(
        None,
        description="Store as a half message of a transaction: invisible until POST "
        "/transactions/{transaction_id} commits it. In a batch, every entry joins one transaction. "
        "A transactional message cannot be scheduled.",
    )

    @model_validator(mode="after")
    def _check(self) -> ProduceIn:
        check(_PRODUCE_RULES, self.__dict__)
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
        :func:`broker.produce.scheduling`, which checks the three scheduling fields."""
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


class ProduceEntryIn(ProduceIn):
    """One message of a batch: a :class:`ProduceIn` that may name another topic."""

    topic: TopicName | None = Field(
        None,
        description="Write this entry to another topic than the path's (e.g. a transaction across topics).",
    )


def entry_topic(entry: ProduceIn, path_topic: str) -> str:
    """The topic an entry goes to: its own (batch entries only) or the path's."""
    return getattr(entry, "topic", None) or path_topic


#: A batch's transaction covers every entry, and a transactional message cannot be scheduled
#: (400 ``invalid_transaction``, checked while producing).
_NO_SCHEDULED_ENTRY_IN_A_TRANSACTION: dict[str, Any] = {
    "not": {
        "allOf": [
            given("transaction"),
            {
                "required": ["messages"],
                "properties": {"messages": {"contains": {"anyOf": [given(f) for f in _SCHEDULING]}}},
            },
        ]
    }
}


class ProduceBatchIn(BaseModel):
    """A batch: every message is stored or none. Entries that name a transaction name the same
    one as each other and as the batch (400 ``invalid_transaction``), a rule across entries
    that JSON Schema cannot state."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_NO_SCHEDULED_ENTRY_IN_A_TRANSACTION)

    messages: list[ProduceEntryIn] = Field(
        min_length=1, json_schema_extra=config_limit(maxItems="max_batch_messages")
    )
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
        min_length=1,
        max_length=2048,
        json_schema_extra={"pattern": CHECK_URL_PATTERN},  # checked by the board: 400 invalid_argument
        description="http(s) URL the broker POSTs checks to.",
    )


class ProducerGroupOut(BaseModel):
    producer_group: str
    check_url: str
    registered_timestamp: int


class TopicIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queues: QueueCount = Field(description="Queue count; an existing topic only grows.")
    brokers: list[Annotated[str, Field(pattern=f"^{BROKER_NAME_PATTERN}$")]] | None = Field(
        None,
        min_length=1,
        description="Cluster mode: place the new queue ids on these brokers (default: round robin over "
        "the live brokers). Existing queues never move.",
    )


class QueueOffsetsOut(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int = Field(description="Next offset to be written.")
    broker: str | None = Field(None, description="Cluster mode: the broker that owns the queue.")
    available: bool | None = Field(
        None, description="Cluster mode: false when the owner is down (its offsets are then unknown: 0)."
    )


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
