"""Group commit of single produces, on a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.coalescer import ProduceCoalescer, store_each
from store.errors import MessageTooLarge, UnknownQueue
from store.message_store import MessageStore
from store.types import Message
from tests.support.stores import light_config


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(light_config(tmp_path / "store")) as opened:
        opened.create_topic("t", 2)
        yield opened


def test_a_failed_group_is_retried_one_by_one(store: MessageStore) -> None:
    good = Message(topic="t", body=b"ok", queue_id=0)
    huge_properties = Message(topic="t", body=b"x", queue_id=0, properties={"p": "v" * 40_000})
    bad_queue = Message(topic="t", body=b"x", queue_id=7)
    outcomes = store_each(store, [good, huge_properties, good, bad_queue])
    assert [type(o) for o in outcomes[1::2]] == [MessageTooLarge, UnknownQueue]
    assert [o.queue_offset for o in outcomes[0::2]] == [0, 1]  # type: ignore[union-attr]
    assert store.max_offset("t", 0) == 2


def test_concurrent_puts_share_a_group_and_keep_their_own_outcome(store: MessageStore) -> None:
    async def scenario() -> list[object]:
        coalescer = ProduceCoalescer(store)
        messages = [Message(topic="t", body=f"m{i}".encode(), queue_id=1) for i in range(50)]
        messages[25] = Message(topic="t", body=b"bad", queue_id=9)
        return await asyncio.gather(*(coalescer.put(m) for m in messages), return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert isinstance(outcomes.pop(25), UnknownQueue)
    assert sorted(o.queue_offset for o in outcomes) == list(range(49))  # type: ignore[attr-defined]
    bodies = [v.body for v in store.get_messages("t", 1, 0, max_messages=100).messages]
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(50) if i != 25)
