"""Bodies of consumer groups: offsets, resets, describe, lag."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ingest_api.http.fields import (
    QUEUE_KEY_PATTERN,
    Flag,
    Offset,
    QueueId,
    QueueKey,
    Shift,
    TopicName,
)
from ingest_api.http.schema_rules import ExactlyOne, GivenWhen, check, schema_of


class GroupOffsetsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    topic: TopicName
    offsets: dict[QueueKey, Offset] = Field(
        min_length=1,
        description='Queue id (as a string key) -> next offset to consume, e.g. {"0": 12}. 409 '
        "unknown_queue / offset_out_of_range for a queue the topic lacks or an offset past its max.",
        json_schema_extra={"propertyNames": {"pattern": QUEUE_KEY_PATTERN}},
    )


class GroupOffsetsOut(BaseModel):
    group: str
    topic: str
    offsets: dict[int, int] = Field(description="Queue id -> committed next offset (-1: none).")
    unavailable: list[str] | None = Field(
        None, description="Cluster mode: brokers that could not be asked (their queues show -1)."
    )


_RESET_RULES = (ExactlyOne("timestamp_ms", "to"), GivenWhen("shift_by", "to", "shift"))


class GroupResetIn(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=schema_of(_RESET_RULES))

    topic: TopicName
    timestamp_ms: Offset | None = Field(None, description="Reset to the first offset at/after T.")
    to: Literal["earliest", "latest", "shift"] | None = Field(
        None, description="earliest / latest offset, or shift: the committed offset plus shift_by."
    )
    shift_by: Shift | None = Field(None, description="With to=shift: messages to skip (negative: re-read).")
    queue_id: QueueId | None = Field(None, description="Reset only this queue (default: every queue).")
    dry_run: Flag = Field(False, description="Answer the plan without committing anything.")

    @model_validator(mode="after")
    def _check(self) -> GroupResetIn:
        check(_RESET_RULES, self.__dict__)
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
    unavailable: list[str] | None = Field(
        None, description="Cluster mode: brokers that could not be asked (their queues are left out)."
    )


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
    unavailable: list[str] | None = Field(
        None, description="Cluster mode: brokers that could not be asked (their queues are left out)."
    )


class PopCountsOut(BaseModel):
    """A POP group's in-flight state (in a cluster: summed over the brokers)."""

    inflight: int = Field(description="Received and neither acked nor dead-lettered yet.")
    visible_again: int = Field(
        description="Of those, past their invisible time: the backlog waiting for a receive."
    )
    oldest_inflight_age_ms: int = Field(description="Age of the oldest delivery in flight (0: none).")
    redeliveries: int = Field(description="Redeliveries since the broker started.")
    dead_letters: int = Field(description="Messages dead-lettered since the broker started.")


class GroupSummaryOut(BaseModel):
    group: str
    kind: Literal["offset", "pop"] = Field(
        description="`offset`: committed offsets (HTTP pull, Spark, Kafka); `pop`: receive / ack."
    )
    topics: list[str] = Field(description="Topics it has offsets for (offset) or received from (pop).")
    pop: PopCountsOut | None = Field(None, description="A POP group's counts; null for an offset group.")


class GroupListOut(BaseModel):
    groups: dict[str, list[str]] = Field(
        description="Offset-based group -> topics it has offsets for (POP groups are in `summaries`)."
    )
    summaries: list[GroupSummaryOut] = Field(
        description="Every group, offset-based and POP, by name, with its kind."
    )
