"""Send-backs in the broker core: a batch's messages are read once, before queues are claimed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.retries import GroupConfigs, SendBackItem, UnknownMessage, send_back_many
from store import SENDBACK_TOPIC, Message, MessageStore
from tests.support.stores import tiny_config


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    opened = MessageStore.open(tiny_config(tmp_path / "store"))
    yield opened
    opened.close()


class Claims:
    """``own_queues`` of a cluster member: this broker's ids are retry 4-5 and DLQ 3."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, topic: str, count: int) -> list[int]:
        self.calls.append((topic, count))
        return [3] if topic.startswith("%DLQ%") else [4, 5]


def _counting(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"read_records": 0, "get_by_msg_id": 0, "read_record": 0}
    for name in counts:
        original = getattr(store, name)

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(store, name, counted)
    return counts


@pytest.mark.parametrize("count", [3, 12])
def test_a_cluster_send_back_reads_its_messages_once(
    store: MessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    results = store.put_messages([Message(topic="work", body=b"m%d" % i) for i in range(count)])
    items = [SendBackItem("work", r.msg_id, delay_level=-1 if i == 0 else 0) for i, r in enumerate(results)]
    counts = _counting(store, monkeypatch)
    claims = Claims()
    answers = send_back_many(store, GroupConfigs(tmp_path / "config"), "billing", items, own_queues=claims)
    assert [a.outcome for a in answers] == ["dlq"] + ["retry"] * (count - 1)
    # found once: one pass over the CommitLog for a batch, one lookup per message for a few
    if count > 8:
        assert counts == {"read_records": 1, "get_by_msg_id": 0, "read_record": 0}
    else:
        assert counts == {"read_records": 0, "get_by_msg_id": count, "read_record": count}
    assert sorted(claims.calls) == [("%DLQ%billing", 1), ("%RETRY%billing", 1)]
    stored = store.get_messages(SENDBACK_TOPIC, 0, 0, 100).messages
    assert len(stored) == count
    for view in stored:  # this broker's own retry and DLQ queue ids travel with each request
        assert (view.properties["SENDBACK_RETRY_BASE"], view.properties["SENDBACK_DLQ_QUEUE"]) == ("4", "3")


def test_a_missing_message_claims_no_queue(store: MessageStore, tmp_path: Path) -> None:
    results = store.put_messages([Message(topic="work", body=b"m%d" % i) for i in range(12)])
    items = [SendBackItem("work", r.msg_id) for r in results] + [SendBackItem("work", "NOSUCHKEY")]
    claims = Claims()
    with pytest.raises(UnknownMessage, match=r"messages\[12\]"):
        send_back_many(store, GroupConfigs(tmp_path / "config"), "billing", items, own_queues=claims)
    assert claims.calls == []
