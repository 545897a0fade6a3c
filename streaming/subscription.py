"""Which queues a ``sparkmq`` source reads: Kafka's three ways of saying it, and sparkmq's own.

* ``topic`` / ``topics`` / ``subscribe`` — a comma list of topics, every queue of each;
* ``subscribePattern`` — a regular expression over topic names (matched against the whole
  name, as Kafka's ``Pattern.matcher(topic).matches()``); topics created while a stream runs
  are picked up between micro-batches, like new queues (registered at their earliest offset
  in one batch, read from the next). System, retry and DLQ topics never match, as Kafka's
  internal topics do not;
* ``assign`` — JSON ``{"orders": [0, 1]}``: exactly those queues.

Exactly one of them. Parsing is pure; :meth:`Subscription.topics_now` asks a topic lister
(``Backend.topics``) only for a pattern.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from store import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    InvalidArgument,
    is_system_topic,
    validate_group,
    validate_topic,
)


class Kind(enum.Enum):
    TOPICS = "topics"
    PATTERN = "pattern"
    ASSIGN = "assign"


#: The options that choose the queues (lower case) -> the spelling used in messages.
SELECTORS = {
    "topic": "topic",
    "topics": "topics",
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
    "assign": "assign",
}


class SubscriptionError(InvalidArgument):
    """A selector option is missing, malformed or contradictory (``option`` names it)."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(problem)
        self.option = option


@dataclass(frozen=True)
class Subscription:
    """What to read. Picklable (it travels to executors inside the options)."""

    kind: Kind
    #: The option the user spelled (for messages): topic, topics, subscribe, ...
    option: str
    #: TOPICS / ASSIGN: the topics, sorted (with ``includeRetry``'s retry topic).
    topics: tuple[str, ...] = ()
    #: PATTERN: the regular expression.
    pattern: str | None = None
    #: ASSIGN: topic -> the queue ids to read.
    queues: Mapping[str, frozenset[int]] = field(default_factory=dict)
    #: PATTERN with ``includeRetry``: retry topics read besides the matches.
    extra_topics: tuple[str, ...] = ()

    def topics_now(self, list_topics: Callable[[], Iterable[str]]) -> tuple[str, ...]:
        """The topics to read at this moment (``list_topics`` is only called for a pattern)."""
        if self.kind is not Kind.PATTERN:
            return self.topics
        assert self.pattern is not None
        compiled = re.compile(self.pattern)
        matched = {t for t in list_topics() if readable_by_pattern(t) and compiled.fullmatch(t)}
        return tuple(sorted(matched | set(self.extra_topics)))

    def admits(self, topic: str, queue_id: int | None = None) -> bool:
        """Whether ``topic`` (and ``queue_id``, when given) is part of the subscription."""
        if self.kind is Kind.ASSIGN:
            queues = self.queues.get(topic)
            return queues is not None and (queue_id is None or queue_id in queues)
        if self.kind is Kind.PATTERN:
            assert self.pattern is not None
            if topic in self.extra_topics:
                return True
            return readable_by_pattern(topic) and re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


def readable_by_pattern(topic: str) -> bool:
    return not is_system_topic(topic) and not topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))


def parse_subscription(
    lower: Mapping[str, str], *, system_topics: frozenset[str] = frozenset()
) -> Subscription:
    """The subscription of Spark's (lower-cased) options. ``system_topics`` are the system
    topics the caller allows (the operators' inputs). Raises :class:`SubscriptionError`."""
    given = [name for name in SELECTORS if name in lower]
    if not given:
        raise SubscriptionError(
            "topic", "is required: set one of topic, topics, subscribe, subscribePattern or assign"
        )
    if len(given) > 1:
        names = ", ".join(SELECTORS[g] for g in given)
        raise SubscriptionError(SELECTORS[given[1]], f"set only one of {names} (they all choose the queues)")
    option = SELECTORS[given[0]]
    raw = lower[given[0]]
    retry = _retry_topic(lower.get("includeretry"))
    if given[0] == "subscribepattern":
        return Subscription(Kind.PATTERN, option, pattern=_pattern(raw), extra_topics=retry)
    if given[0] == "assign":
        if retry:
            raise SubscriptionError("includeRetry", "cannot be combined with 'assign' (it names its queues)")
        queues = _assignment(raw, system_topics)
        return Subscription(Kind.ASSIGN, option, topics=tuple(sorted(queues)), queues=queues)
    topics = [t.strip() for t in raw.split(",") if t.strip() or given[0] != "subscribe"]
    for topic in topics:
        _check_topic(option, topic, system_topics)
    topics += retry
    if not topics:
        raise SubscriptionError(option, f"names no topic: {raw!r}")
    if len(set(topics)) != len(topics):
        raise SubscriptionError(option, f"duplicate topic in {raw!r}")
    return Subscription(Kind.TOPICS, option, topics=tuple(sorted(topics)))


def _check_topic(option: str, topic: str, system_topics: frozenset[str]) -> None:
    try:
        validate_topic(topic, allow_system=topic in system_topics)
    except InvalidArgument as exc:
        raise SubscriptionError(option, str(exc)) from None


def _retry_topic(group: str | None) -> tuple[str, ...]:
    """``includeRetry=<group>``: the group's retry topic too, so retries arrive in the stream."""
    if group is None:
        return ()
    try:
        validate_group(group.strip())
    except InvalidArgument as exc:
        raise SubscriptionError("includeRetry", str(exc)) from None
    return (f"{RETRY_TOPIC_PREFIX}{group.strip()}",)


def _pattern(raw: str) -> str:
    pattern = raw.strip()
    if not pattern:
        raise SubscriptionError("subscribePattern", "is empty")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise SubscriptionError("subscribePattern", f"is not a regular expression: {exc}") from None
    return pattern


def _assignment(raw: str, system_topics: frozenset[str]) -> dict[str, frozenset[int]]:
    example = 'expected JSON like {"orders": [0, 1]}'
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SubscriptionError("assign", f"{example}: {exc}") from None
    if not isinstance(value, dict) or not value:
        raise SubscriptionError("assign", f"{example}, got {raw!r}")
    queues: dict[str, frozenset[int]] = {}
    for topic, ids in value.items():
        _check_topic("assign", topic, system_topics)
        if not isinstance(ids, list) or not ids:
            raise SubscriptionError("assign", f"topic {topic!r} needs a non-empty list of queue ids")
        if any(isinstance(q, bool) or not isinstance(q, int) or q < 0 for q in ids):
            raise SubscriptionError("assign", f"queue ids of {topic!r} must be integers >= 0, got {ids}")
        if len(set(ids)) != len(ids):
            raise SubscriptionError("assign", f"duplicate queue id for {topic!r}: {ids}")
        queues[topic] = frozenset(ids)
    return queues
