"""Topic and group names: the charset and limits, system topics, retry and DLQ topic names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.errors import InvalidArgument, InvalidGroupName, InvalidTopicName
from store.names import (
    GROUP_NAME_PATTERN,
    NAME_CHARS,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TOPIC_NAME_PATTERN,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    dlq_topic,
    is_system_topic,
    retry_topic,
    validate_group,
    validate_topic,
)


@pytest.mark.parametrize(
    "topic",
    ["orders", "a", "A-b_c", "x" * 127, "%RETRY%grp", "%DLQ%grp", "a|b", "0123", "%RETRY%" + "g" * 248],
)
def test_valid_topics(topic: str) -> None:
    assert validate_topic(topic) == topic


@pytest.mark.parametrize(
    ("topic", "why"),
    [
        ("", "empty"),
        ("x" * 128, "limit is 127"),
        ("%RETRY%" + "g" * 249, "limit is 255"),
        ("a/b", "characters outside"),
        ("a\\b", "characters outside"),
        (".", "characters outside"),
        ("..", "characters outside"),
        ("a.b", "characters outside"),
        ("a b", "characters outside"),
        ("t@g", "characters outside"),
        ("caf\u00e9", "characters outside"),
        ("a\x00", "characters outside"),
        ("TBW102", "reserved"),
        ("SCHEDULE_TOPIC_XXXX", "reserved"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", "reserved"),
        ("RMQ_SYS_TRACE_TOPIC", "reserved"),
        ("RMQ_SYS_TRANS_OP_HALF_TOPIC", "reserved"),
        ("TRANS_CHECK_MAX_TIME_TOPIC", "reserved"),
        ("SELF_TEST_TOPIC", "reserved"),
        ("OFFSET_MOVED_EVENT", "reserved"),
        ("rmq_sys_anything", "reserved"),
    ],
)
def test_invalid_topics(topic: str, why: str) -> None:
    with pytest.raises(InvalidTopicName, match=why):
        validate_topic(topic)


def test_invalid_topic_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        validate_topic("a/b")


@pytest.mark.parametrize("topic", [*sorted(SYSTEM_TOPICS), "rmq_sys_x"])
def test_system_topics_allowed_for_the_store(topic: str) -> None:
    assert is_system_topic(topic)
    assert validate_topic(topic, allow_system=True) == topic


def test_system_topic_constants() -> None:
    assert SCHEDULE_TOPIC == "SCHEDULE_TOPIC_XXXX"
    assert TRANS_HALF_TOPIC == "RMQ_SYS_TRANS_HALF_TOPIC"
    assert TRANS_OP_HALF_TOPIC == "RMQ_SYS_TRANS_OP_HALF_TOPIC"
    assert not is_system_topic("orders")


@pytest.mark.parametrize("group", ["g", "CID_x-1", "g" * 120, "a|b%c"])
def test_valid_groups(group: str) -> None:
    assert validate_group(group) == group


@pytest.mark.parametrize(
    ("group", "why"),
    [("", "empty"), ("g" * 121, "limit is 120"), ("a/b", "outside"), ("..", "outside"), ("t@g", "outside")],
)
def test_invalid_groups(group: str, why: str) -> None:
    with pytest.raises(InvalidGroupName, match=why):
        validate_group(group)


def test_retry_and_dlq_topics() -> None:
    assert retry_topic("g1") == "%RETRY%g1"
    assert dlq_topic("g1") == "%DLQ%g1"
    with pytest.raises(InvalidGroupName):
        retry_topic("bad/group")


#: Names near the rules' edges: the charset and a few characters outside it, around both lengths.
_NAME_CHARS = st.sampled_from([*sorted(NAME_CHARS), "/", ".", "@", " ", "\x00", "\n", "\u00e9"])
_PREFIXED = st.builds(
    lambda prefix, rest: prefix + rest,
    st.sampled_from(["%RETRY%", "%DLQ%"]),
    st.text(_NAME_CHARS, max_size=255),
)
_NEAR_LIMITS = st.builds(
    lambda n, c: c * n, st.integers(118, 130) | st.integers(245, 258), st.sampled_from(["a", "%", "|"])
)
_NAMES = st.one_of(st.text(_NAME_CHARS, max_size=260), _PREFIXED, _NEAR_LIMITS)


def _accepts(validate: object, name: str) -> bool:
    try:
        validate(name)  # type: ignore[operator]
    except InvalidArgument:
        return False
    return True


@settings(max_examples=500, deadline=None)
@given(_NAMES)
def test_the_topic_pattern_is_the_topic_rule(name: str) -> None:
    """TOPIC_NAME_PATTERN (the OpenAPI document's) accepts exactly what validate_topic does."""
    accepted = _accepts(lambda n: validate_topic(n, allow_system=True), name)
    assert (re.fullmatch(TOPIC_NAME_PATTERN, name) is not None) == accepted, name


@settings(max_examples=500, deadline=None)
@given(_NAMES)
def test_the_group_pattern_is_the_group_rule(name: str) -> None:
    assert (re.fullmatch(GROUP_NAME_PATTERN, name) is not None) == _accepts(validate_group, name), name
