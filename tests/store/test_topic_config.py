"""The topic config table: RocketMQ's topics.json entries, create/grow/delete, refusals, corrupt entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store.errors import CorruptStore, InvalidArgument, InvalidTopicName
from store.metadata.topic_config import TopicConfig, TopicConfigTable
from store.names import SCHEDULE_TOPIC


def test_create_grow_never_shrink(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / "topics.json")
    assert table.create_or_grow("orders", 4) == TopicConfig("orders", 4)
    assert table.create_or_grow("orders", 2).queues == 4
    assert table.create_or_grow("orders", 8).queues == 8
    assert table.get("orders") == TopicConfig("orders", 8)
    assert "orders" in table
    assert table.get("missing") is None


def test_file_format_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "config" / "topics.json"
    table = TopicConfigTable(path, lambda: 5)
    table.create_or_grow("orders", 2)
    table.create_or_grow(SCHEDULE_TOPIC, 18, allow_system=True)
    assert table.persist()
    assert json.loads(path.read_text()) == {
        "topicConfigTable": {
            "SCHEDULE_TOPIC_XXXX": {
                "topicName": "SCHEDULE_TOPIC_XXXX",
                "queues": 18,
                "readQueueNums": 18,
                "writeQueueNums": 18,
                "perm": 6,
                "order": False,
            },
            "orders": {
                "topicName": "orders",
                "queues": 2,
                "readQueueNums": 2,
                "writeQueueNums": 2,
                "perm": 6,
                "order": False,
            },
        },
        "dataVersion": {"counter": 1, "timestamp": 5},
    }
    reloaded = TopicConfigTable(path)
    assert reloaded.topics() == {"orders": 2}
    assert reloaded.topics(include_system=True) == {"SCHEDULE_TOPIC_XXXX": 18, "orders": 2}
    assert not reloaded.dirty


def test_reads_rocketmq_topic_entries(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text(
        '{"topicConfigTable":{"TopicTest":{"topicName":"TopicTest","readQueueNums":4,'
        '"writeQueueNums":8,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}}}'
    )
    assert TopicConfigTable(path).topics() == {"TopicTest": 8}


def test_delete(tmp_path: Path) -> None:
    table = TopicConfigTable(tmp_path / "topics.json")
    table.create_or_grow("a", 1)
    table.persist()
    assert table.delete("a")
    assert table.dirty
    assert not table.delete("a")
    table.persist()
    assert TopicConfigTable(tmp_path / "topics.json").topics() == {}


@pytest.mark.parametrize(
    ("topic", "queues", "error"),
    [
        ("a/b", 1, InvalidTopicName),
        ("TBW102", 1, InvalidTopicName),
        ("ok", 0, InvalidArgument),
        ("ok", 1025, InvalidArgument),
    ],
)
def test_refuses_bad_input(tmp_path: Path, topic: str, queues: int, error: type[Exception]) -> None:
    table = TopicConfigTable(tmp_path / "topics.json")
    with pytest.raises(error):
        table.create_or_grow(topic, queues)
    assert not table.dirty


def test_corrupt_entries(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    path.write_text('{"topicConfigTable": {"t": {"queues": 0}}}')
    with pytest.raises(CorruptStore, match="0 queues"):
        TopicConfigTable(path)
    path.write_text('{"topicConfigTable": []}')
    with pytest.raises(CorruptStore):
        TopicConfigTable(path)
