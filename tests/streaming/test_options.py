"""Option parsing and validation (pure; no Spark, no store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.options import (
    EndKind,
    InvalidSourceOption,
    StartKind,
    parse_options,
)


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    return str(tmp_path)


def test_minimal_path_options(store_dir: str) -> None:
    opts = parse_options({"path": store_dir, "topic": "orders"})
    assert opts.path == store_dir
    assert opts.endpoint is None
    assert opts.data_mode == "path"
    assert opts.topics == ("orders",)
    assert opts.tags == "*"
    assert opts.starting is None
    assert opts.ending is None
    assert opts.max_messages_per_trigger is None
    assert opts.fail_on_data_loss is True
    assert opts.group is None
    assert opts.poll_interval_s == 0.05


def test_keys_are_case_insensitive_and_aliases_work() -> None:
    opts = parse_options(
        {
            "ENDPOINT": "http://127.0.0.1:8080/",
            "Topics": "b,a",
            "maxOffsetsPerTrigger": "100",
            "TAGS": "paid||refunded",
            "group": "billing",
            "failOnDataLoss": "FALSE",
            "minPartitions": "3",
        }
    )
    assert opts.endpoint == "http://127.0.0.1:8080"
    assert opts.data_mode == "endpoint"
    assert opts.topics == ("a", "b")
    assert opts.max_messages_per_trigger == 100
    assert opts.tags == "paid || refunded"
    assert opts.group == "billing"
    assert opts.fail_on_data_loss is False
    assert opts.min_partitions == 3


def test_starting_and_ending_positions(store_dir: str) -> None:
    base = {"path": store_dir, "topics": "orders,refunds"}
    assert parse_options({**base, "startingOffsets": "earliest"}).starting.kind is StartKind.EARLIEST  # type: ignore[union-attr]
    assert parse_options({**base, "startingOffsets": "LATEST"}).starting.kind is StartKind.LATEST  # type: ignore[union-attr]
    json_start = parse_options({**base, "startingOffsets": '{"orders": {"0": 12, "3": -2}}'}).starting
    assert json_start is not None
    assert json_start.kind is StartKind.OFFSETS
    assert json_start.per_queue == {"orders": {0: 12, 3: -2}}
    ts = parse_options({**base, "startingTimestamp": "1763700000000"}).starting
    assert ts is not None
    assert (ts.kind, ts.timestamp_ms) == (StartKind.TIMESTAMP, 1763700000000)
    by_ts = parse_options({**base, "startingOffsetsByTimestamp": '{"refunds": {"1": 5}}'}).starting
    assert by_ts is not None
    assert by_ts.kind is StartKind.TIMESTAMPS
    assert by_ts.per_queue == {"refunds": {1: 5}}
    end = parse_options({**base, "endingTimestamp": "1763700000999"}).ending
    assert end is not None
    assert (end.kind, end.timestamp_ms) == (EndKind.TIMESTAMP, 1763700000999)
    end_json = parse_options({**base, "endingOffsets": '{"orders": {"1": 7}}'}).ending
    assert end_json is not None
    assert end_json.per_queue == {"orders": {1: 7}}


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"topic": "t"}, "endpoint"),
        ({"endpoint": "ftp://x", "topic": "t"}, "endpoint"),
        ({"endpoint": "127.0.0.1:8080", "topic": "t"}, "endpoint"),
        ({"path": "/definitely/not/here", "topic": "t"}, "path"),
        ({"endpoint": "http://h:1"}, "topic"),
        ({"endpoint": "http://h:1", "topic": "a", "topics": "b"}, "topics"),
        ({"endpoint": "http://h:1", "topic": "bad topic"}, "topic"),
        ({"endpoint": "http://h:1", "topics": "a,a"}, "topics"),
        ({"endpoint": "http://h:1", "topic": "SCHEDULE_TOPIC_XXXX"}, "topic"),
        ({"endpoint": "http://h:1", "topic": "t", "tags": "a || "}, "tags"),
        ({"endpoint": "http://h:1", "topic": "t", "startingOffsets": "sometime"}, "startingOffsets"),
        (
            {"endpoint": "http://h:1", "topic": "t", "startingOffsets": '{"other": {"0": 1}}'},
            "startingOffsets",
        ),
        ({"endpoint": "http://h:1", "topic": "t", "startingOffsets": '{"t": {"x": 1}}'}, "startingOffsets"),
        ({"endpoint": "http://h:1", "topic": "t", "startingOffsets": '{"t": {"0": -7}}'}, "startingOffsets"),
        ({"endpoint": "http://h:1", "topic": "t", "startingOffsets": '{"t": {"0": "1"}}'}, "startingOffsets"),
        ({"endpoint": "http://h:1", "topic": "t", "startingTimestamp": "yesterday"}, "startingTimestamp"),
        (
            {"endpoint": "http://h:1", "topic": "t", "startingTimestamp": "1", "startingOffsets": "earliest"},
            "startingOffsets",
        ),
        ({"endpoint": "http://h:1", "topic": "t", "endingOffsets": "earliest"}, "endingOffsets"),
        ({"endpoint": "http://h:1", "topic": "t", "endingTimestamp": "-5"}, "endingTimestamp"),
        ({"endpoint": "http://h:1", "topic": "t", "maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger"),
        ({"endpoint": "http://h:1", "topic": "t", "maxOffsetsPerTrigger": "x"}, "maxOffsetsPerTrigger"),
        ({"endpoint": "http://h:1", "topic": "t", "minPartitions": "-1"}, "minPartitions"),
        ({"endpoint": "http://h:1", "topic": "t", "group": "bad group"}, "group"),
        ({"endpoint": "http://h:1", "topic": "t", "pollIntervalMs": "-1"}, "pollIntervalMs"),
        ({"endpoint": "http://h:1", "topic": "t", "groupCommitIntervalMs": "soon"}, "groupCommitIntervalMs"),
        ({"endpoint": "http://h:1", "topic": "t", "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({"endpoint": "http://h:1", "topic": "t", "startingOfsets": "earliest"}, "startingofsets"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidSourceOption, match=f"option '{named}'") as info:
        parse_options(options)
    assert info.value.option == named


def test_mode_specific_rules() -> None:
    base = {"endpoint": "http://h:1", "topic": "t"}
    with pytest.raises(InvalidSourceOption, match="'endingOffsets'"):
        parse_options({**base, "endingOffsets": "latest"}).validate_for_stream()
    with pytest.raises(InvalidSourceOption, match="'endingTimestamp'"):
        parse_options({**base, "endingTimestamp": "5"}).validate_for_stream()
    with pytest.raises(InvalidSourceOption, match="'maxMessagesPerTrigger'"):
        parse_options({**base, "maxMessagesPerTrigger": "5"}).validate_for_batch()
    with pytest.raises(InvalidSourceOption, match="'startingOffsets'"):
        parse_options({**base, "startingOffsets": "latest"}).validate_for_batch()
    parse_options({**base, "endingOffsets": "latest"}).validate_for_batch()
    parse_options({**base, "maxMessagesPerTrigger": "5"}).validate_for_stream()
