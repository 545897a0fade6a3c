"""What the console pages show, read from the store (blocking: callers use a worker thread).

Every list is cut to one page *before* anything costly is read: queue offsets, lag and the
age of the oldest unconsumed message are computed only for the rows on the page (the lesson
of AKHQ #2171, Kafbat #1776 and RabbitMQ's management PR #399).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.group_listing import GroupSummary, PopCounts
from broker.lag import GroupQueueRow, group_topic_rows, lag_seconds, stored_at
from broker.pop import GroupKind, GroupStats
from store import MessageStore, MessageView

__all__ = ["GroupQueueRow", "group_topic_rows", "lag_seconds", "stored_at"]

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 200
#: Groups shown on a topic's page (each costs one lag computation).
MAX_TOPIC_GROUPS = 50


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a longer list: ``total`` rows matched, ``items`` are those on page ``page``."""

    items: list[T]
    page: int
    page_size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.page_size))

    @property
    def has_prev(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages


def paginate(names: Sequence[str], page: int, page_size: int) -> Page[str]:
    """Cut sorted ``names`` to one page (page numbers start at 1, clamped to the last page)."""
    size = min(max(page_size, 1), MAX_PAGE_SIZE)
    last = max(1, math.ceil(len(names) / size))
    number = min(max(page, 1), last)
    start = (number - 1) * size
    return Page(list(names[start : start + size]), number, size, len(names))


def matching(names: Sequence[str], name_filter: str) -> list[str]:
    """Sorted names containing ``name_filter`` (case-insensitive)."""
    needle = name_filter.strip().lower()
    return sorted(name for name in names if needle in name.lower())


@dataclass(frozen=True)
class TopicRow:
    name: str
    queues: int
    #: Messages still retained (sum over queues of max - min offset).
    messages: int


def topic_rows(store: MessageStore, names: Sequence[str]) -> list[TopicRow]:
    rows = []
    for name in names:
        offsets = store.queue_offsets(name)
        rows.append(TopicRow(name, len(offsets), sum(high - low for low, high in offsets.values())))
    return rows


@dataclass(frozen=True)
class QueueRow:
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_ms: int | None


@dataclass(frozen=True)
class GroupTopicLag:
    group: str
    topic: str
    lag: int
    lag_seconds: float | None


@dataclass(frozen=True)
class TopicDetail:
    name: str
    queues: list[QueueRow]
    groups: list[GroupTopicLag]
    #: More groups read the topic than are shown.
    groups_truncated: bool


def summarize(group: str, topic: str, rows: Sequence[GroupQueueRow]) -> GroupTopicLag:
    ages = [row.lag_seconds for row in rows if row.lag_seconds is not None]
    return GroupTopicLag(group, topic, sum(row.lag for row in rows), max(ages) if ages else None)


def topic_detail(store: MessageStore, topic: str, now_ms: int) -> TopicDetail:
    queues = []
    for queue_id, (low, high) in sorted(store.queue_offsets(topic).items()):
        last = stored_at(store, topic, queue_id, high - 1) if high > low else None
        queues.append(QueueRow(queue_id, low, high, last))
    readers = sorted(group for group, topics in store.groups().items() if topic in topics)
    groups = [
        summarize(group, topic, group_topic_rows(store, group, topic, now_ms))
        for group in readers[:MAX_TOPIC_GROUPS]
    ]
    return TopicDetail(topic, queues, groups, len(readers) > MAX_TOPIC_GROUPS)


@dataclass(frozen=True)
class MemberRow:
    member_id: str
    client_id: str
    client_host: str


@dataclass(frozen=True)
class KafkaGroupInfo:
    """What the Kafka coordinator knows of a group (members live only in its memory)."""

    state: str
    protocol: str
    members: tuple[MemberRow, ...]


@dataclass(frozen=True)
class GroupRow:
    name: str
    #: "kafka" for groups the Kafka gateway coordinates, "POP" for groups consumed by receive /
    #: ack, else "offset table" (HTTP commits and Spark queries mirrored with the source's
    #: ``group`` option).
    kind: str
    topics: list[str]
    lags: list[GroupTopicLag]
    members: int
    #: A POP group's in-flight counts (its lag columns stay empty: it has no offsets).
    pop: PopCounts | None = None

    @property
    def total_lag(self) -> int:
        return sum(lag.lag for lag in self.lags)

    @property
    def max_lag_seconds(self) -> float | None:
        ages = [lag.lag_seconds for lag in self.lags if lag.lag_seconds is not None]
        return max(ages) if ages else None


def group_rows(
    store: MessageStore,
    names: Sequence[str],
    summaries: Mapping[str, GroupSummary],
    kafka: dict[str, KafkaGroupInfo],
    may_read: Callable[[str], bool],
    now_ms: int,
) -> list[GroupRow]:
    """Rows for the groups on one page (``summaries``: :func:`broker.group_listing.local_listing`'s,
    by name): an offset group's lag per topic (in messages and seconds), a POP group's counts."""
    rows = []
    for name in names:
        summary = summaries.get(name)
        listed = summary.topics if summary is not None else ()
        topics = [t for t in listed if may_read(t) and store.has_topic(t)]
        if summary is not None and summary.kind is GroupKind.POP:
            rows.append(GroupRow(name, "POP", topics, [], 0, summary.pop))
            continue
        lags = [summarize(name, t, group_topic_rows(store, name, t, now_ms)) for t in topics]
        info = kafka.get(name)
        kind = "kafka" if info is not None else "offset table"
        rows.append(GroupRow(name, kind, topics, lags, len(info.members) if info else 0))
    return rows


@dataclass
class GroupDetail:
    name: str
    kind: str
    kafka: KafkaGroupInfo | None
    queues: list[GroupQueueRow] = field(default_factory=list)
    #: A POP group's in-flight state (``broker.pop.GroupStats``) and its DLQ's message count.
    pop: GroupStats | None = None
    dlq_messages: int = 0


def consumed_by(store: MessageStore, view: MessageView) -> list[tuple[str, int]]:
    """Groups whose committed offset on the message's queue is past it: (group, committed)."""
    topic = view.properties.get("REAL_TOPIC", view.topic)
    queue_id = int(view.properties.get("REAL_QID", view.queue_id))
    offset = view.queue_offset
    if topic != view.topic:  # a delayed message: its real queue offset is not known yet
        return []
    found = []
    for group, topics in sorted(store.groups().items()):
        if topic in topics:
            committed = store.committed_offset(group, topic, queue_id)
            if committed > offset:
                found.append((group, committed))
    return found
