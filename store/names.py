"""Topic and consumer-group names: RocketMQ's ``TopicValidator`` rules, plus what a directory needs.

Topic names become directory names (``consumequeue/{topic}/``) and JSON keys
(``topic@group`` in ``consumerOffset.json``), so the charset ``[%|a-zA-Z0-9_-]`` is the only
one accepted: it has no path separator, no ``.``, no ``@`` and no whitespace.

* topic: 1..127 characters; retry/DLQ topics (``%RETRY%group``, ``%DLQ%group``) up to 255.
* group: 1..120 characters.
* reserved system topics (:data:`SYSTEM_TOPICS`) and the ``rmq_sys_`` prefix are refused for
  user topics; the store itself passes ``allow_system=True`` for the topics it owns.
"""

from __future__ import annotations

import re

from store.errors import InvalidGroupName, InvalidTopicName

#: Delay-level messages wait here (queue ``level - 1``) until due.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: Transactional half (prepared) messages.
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: Transaction op messages ("d" = done) that mark half messages as resolved.
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: Timer messages (RocketMQ 5 ``TimerMessageStore.TIMER_TOPIC``) wait here, queue 0, until due.
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: The operator job's resolver queries, by name: the job's ``--queries``, ``serve
#: --operator-queries``, the ``/operators/{name}`` routes the broker serves them under.
DELAY_OPERATOR = "delay"
TRANSACTION_OPERATOR = "transactions"
RETRY_OPERATOR = "retry"
#: Consumer send-back requests (sparkmq): read by the retry resolver, relocated into the ladder.
SENDBACK_TOPIC = "rmq_sys_sendback"
#: Consumer offsets committed by transactions (sparkmq): a half while the transaction is open,
#: a final record here once it commits (store.write.transactions, offsets records).
TRANS_OFFSETS_TOPIC = "rmq_sys_trans_offsets"
#: POP consumption state (sparkmq, broker/pop/state_codec.py): receives, acks, changes of
#: invisible time and dead letters of POP groups, replicated like any record, one queue.
POP_STATE_TOPIC = "rmq_sys_pop_state"
#: Consumer-group offset commits (sparkmq's ``__consumer_offsets``): one record per commit,
#: queue 0 (store.write.offset_log, body: store.format.offset_record).
CONSUMER_OFFSETS_TOPIC = "rmq_sys_CONSUMER_OFFSETS"
#: The Kafka transaction coordinator's state (sparkmq's ``__transaction_state``): producer ids,
#: transactional ids and the ledger, one record per change, queue 0
#: (ingest_api.kafka.txn_log, body: ingest_api.kafka.txn_record).
KAFKA_TXN_STATE_TOPIC = "rmq_sys_KAFKA_TXN_STATE"
#: The exactly-once sink's staged parts and decisions in a replica group (sparkmq): one queue
#: (store.publish.sink_log), so that replication carries them as it carries messages.
SINK_STAGING_TOPIC = "rmq_sys_sink_staging"
#: The auto-create template topic (RocketMQ ``AUTO_CREATE_TOPIC_KEY_TOPIC``).
AUTO_CREATE_TOPIC = "TBW102"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
BENCHMARK_TOPIC = "BenchmarkTest"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

SYSTEM_TOPICS: frozenset[str] = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        BENCHMARK_TOPIC,
        TRANS_HALF_TOPIC,
        TRACE_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

RETRY_TOPIC_PREFIX = "%RETRY%"
DLQ_TOPIC_PREFIX = "%DLQ%"

TOPIC_MAX_LENGTH = 127
RETRY_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120

#: RocketMQ's charset for topic and group names (``TopicValidator``), one character of it.
NAME_CHARSET = r"[%|a-zA-Z0-9_-]"
#: The same charset as a regular expression for a non-empty name.
NAME_PATTERN = NAME_CHARSET + "+"
#: The same charset as a set of characters.
NAME_CHARS = frozenset("%|_-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
#: Ids the broker stores as file names (sink ids, staged parts, operator names).
ID_PATTERN = r"[A-Za-z0-9_.-]{1,128}"


def _topic_name_pattern() -> str:
    """Charset and length of a topic name as one anchored expression: up to
    :data:`RETRY_TOPIC_MAX_LENGTH` with a retry or dead-letter prefix, else up to
    :data:`TOPIC_MAX_LENGTH`. It has no look-around, so Python, Rust (pydantic) and ECMA-262
    (JSON Schema) engines read it alike."""
    prefixed = "|".join(
        f"{re.escape(prefix)}{NAME_CHARSET}{{0,{RETRY_TOPIC_MAX_LENGTH - len(prefix)}}}"
        for prefix in (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)
    )
    return f"^(?:{prefixed}|{NAME_CHARSET}{{1,{TOPIC_MAX_LENGTH}}})$"


#: Every name :func:`validate_topic` accepts with ``allow_system=True`` fully matches this, and
#: no other (``tests/store/test_names.py`` checks both ways). The reserved system names are
#: refused on top for user topics (:data:`SYSTEM_TOPICS`, :data:`SYSTEM_TOPIC_PREFIX`).
TOPIC_NAME_PATTERN = _topic_name_pattern()
#: Every name :func:`validate_group` accepts fully matches this, and no other.
GROUP_NAME_PATTERN = f"^{NAME_CHARSET}{{1,{GROUP_MAX_LENGTH}}}$"

_VALID_NAME = re.compile(NAME_PATTERN)


def is_system_topic(topic: str) -> bool:
    """True for the reserved names and anything starting with ``rmq_sys_``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_retry_or_dlq_topic(topic: str) -> bool:
    return topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))


def retry_topic(group: str) -> str:
    """``%RETRY%{group}`` (the group is validated)."""
    return RETRY_TOPIC_PREFIX + validate_group(group)


def dlq_topic(group: str) -> str:
    """``%DLQ%{group}`` (the group is validated)."""
    return DLQ_TOPIC_PREFIX + validate_group(group)


def _charset_problem(name: str) -> str | None:
    if _VALID_NAME.fullmatch(name):
        return None
    bad = sorted({ch for ch in name if not _VALID_NAME.fullmatch(ch)})
    return f"contains characters outside [%|a-zA-Z0-9_-]: {''.join(bad)!r}"


def validate_topic(topic: str, *, allow_system: bool = False) -> str:
    """Return ``topic`` or raise :class:`InvalidTopicName` saying why it is refused.

    ``allow_system=True`` accepts the reserved system topics (the store's own use).
    """
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicName("topic name is empty")
    limit = RETRY_TOPIC_MAX_LENGTH if is_retry_or_dlq_topic(topic) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise InvalidTopicName(f"topic name is {len(topic)} characters long; the limit is {limit}")
    problem = _charset_problem(topic)
    if problem is not None:
        raise InvalidTopicName(f"topic name {topic!r} {problem}")
    if not allow_system and is_system_topic(topic):
        raise InvalidTopicName(f"topic name {topic!r} is reserved for the system")
    return topic


def validate_group(group: str) -> str:
    """Return ``group`` or raise :class:`InvalidGroupName` saying why it is refused."""
    if not isinstance(group, str) or not group:
        raise InvalidGroupName("group name is empty")
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidGroupName(f"group name is {len(group)} characters long; the limit is {GROUP_MAX_LENGTH}")
    problem = _charset_problem(group)
    if problem is not None:
        raise InvalidGroupName(f"group name {group!r} {problem}")
    return group
