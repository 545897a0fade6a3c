"""A master whose ConsumeQueue cannot take an append (a full disk) undoes the append it has
just written to its CommitLog (issue 33). Its slaves must never get those bytes: a slave that
did would hold, and acknowledge up to, bytes the master no longer has, so the master's next
appends at the same offsets would count as replicated while the slaves hold something else
(the Jepsen run's full-disk cycle lost acknowledged Kafka messages that way after the next
election). The writers send only what the put path has dispatched (``appended_end``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from store import Message
from store.errors import StoreNotWritable
from store.ha import ReplicationMode
from store.io.fs import FaultyFileSystem
from tests.support.replicas import Group, assert_prefix
from tests.support.waiting import wait_until


def test_an_append_the_master_undoes_never_reaches_a_slave(group: Group, monkeypatch: Any) -> None:
    disk = FaultyFileSystem()
    master = group.node(1, fs=disk, replication=ReplicationMode.SYNC, min_insync=1)
    slave = group.node(2)
    group.elect(master, 1)
    slave.ha.become_slave(master.ha.ha_address, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="the slave in sync")
    master.store.put_message(Message(topic="t", body=b"before", queue_id=0))
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, what="copy")
    end_before = master.store.commitlog_max_offset

    queues = master.store._appender._queues
    dispatch = queues.dispatch

    def dispatch_late(batch: Any) -> None:
        # The append is in the CommitLog, not yet dispatched: the writers wake every 100 ms
        # (their heartbeat) and look at the log meanwhile, as they would on a busy master.
        time.sleep(0.5)
        dispatch(batch)

    monkeypatch.setattr(queues, "dispatch", dispatch_late)
    for kind in ("write", "allocate"):  # the full disk: a queue's first ConsumeQueue file
        disk.fail_nth(kind, 1, persistent=True, only="/consumequeue/")
    with pytest.raises(StoreNotWritable, match="ConsumeQueue dispatch failed"):
        master.store.put_message(Message(topic="t", body=b"undone" * 50, queue_id=1))
    assert master.store.commitlog_max_offset == end_before  # the master took it back
    time.sleep(0.3)
    assert slave.store.commitlog_max_offset == end_before, "the slave got bytes the master undid"

    disk.heal()  # space returns: the next appends take the same offsets, and reach the slave
    for i in range(3):
        master.store.put_message(Message(topic="t", body=f"after-{i}".encode(), queue_id=1))
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, what="copy")
    assert_prefix(slave, master)
    assert [m.body for m in slave.store.get_messages("t", 0, 0, 10).messages] == [b"before"]
    wanted = [b"after-0", b"after-1", b"after-2"]
    wait_until(lambda: len(slave.store.get_messages("t", 1, 0, 10).messages) == 3, what="readable")
    assert [m.body for m in slave.store.get_messages("t", 1, 0, 10).messages] == wanted
