"""Group commit of single produces, on a real store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.coalescer import ProduceCoalescer, store_each
from store.errors import FlushSlaveTimeout, MessageTooLarge, NotMaster, UnknownQueue
from store.message_store import MessageStore
from store.types import Message
from tests.support.replication_faults import AckTimesOut
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


def test_a_group_appended_but_not_acknowledged_is_never_stored_again(tmp_path: Path) -> None:
    """The duplicate a partition test caught: a group appended, then refused (the slave slow to
    confirm), was stored again message by message, so each message was in the log twice."""
    with MessageStore.open(light_config(tmp_path / "store", replicated=True)) as replica:
        slave_too_slow = AckTimesOut()  # every write appended, then FLUSH_SLAVE_TIMEOUT
        slave_too_slow.armed = 1_000
        replica.replica_log().set_hooks(slave_too_slow)
        replica.create_topic("t", 2)
        group = [Message(topic="t", body=f"m{i}".encode(), queue_id=i % 2) for i in range(3)]
        outcomes = store_each(replica, group)
        assert [type(o) for o in outcomes] == [FlushSlaveTimeout] * 3
        assert all(o.appended for o in outcomes)  # type: ignore[union-attr]
        replica.replica_log().advance_confirm(replica.commitlog_max_offset)  # the slave caught up
        assert (replica.max_offset("t", 0), replica.max_offset("t", 1)) == (2, 1)  # once each
        replica.replica_log().set_hooks(None)


def test_a_group_refused_for_the_whole_store_is_refused_once_for_each(tmp_path: Path) -> None:
    with MessageStore.open(light_config(tmp_path / "store", replicated=True)) as replica:
        outcomes = store_each(replica, [Message(topic="t", body=b"x", queue_id=0)] * 2)
        assert [type(o) for o in outcomes] == [NotMaster, NotMaster]  # no role yet: nothing stored


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
