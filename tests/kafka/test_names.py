"""Kafka names <-> store names (percent-encoding only where the store needs it)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest_api.kafka.names import from_store, to_store
from store.names import is_system_topic, validate_group, validate_topic


@pytest.mark.parametrize(
    ("kafka", "stored"),
    [
        ("orders", "orders"),
        ("orders.v1", "orders%2Ev1"),
        ("a.b-c_d", "a%2Eb-c_d"),
        ("my group/é", "my%20group%2F%C3%A9"),
        ("%2E", "%252E"),  # a literal escape sequence is escaped itself
        ("50%", "50%"),
    ],
)
def test_examples(kafka: str, stored: str) -> None:
    assert to_store(kafka) == stored
    assert from_store(stored) == kafka


@pytest.mark.parametrize("native", ["%RETRY%group", "%DLQ%group", "plain", "a%2e"])
def test_store_native_names_read_back_unchanged(native: str) -> None:
    assert from_store(native) == native
    assert to_store(native) == native


@given(st.text(min_size=1, max_size=40))
def test_round_trip_and_store_validity(name: str) -> None:
    stored = to_store(name)
    assert from_store(stored) == name
    if len(stored) <= 120:
        validate_group(stored)


@given(st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True).filter(lambda n: not is_system_topic(n)))
def test_kafka_topic_names_become_valid_store_topics(name: str) -> None:
    assert validate_topic(to_store(name)) == to_store(name)
    assert from_store(to_store(name)) == name
