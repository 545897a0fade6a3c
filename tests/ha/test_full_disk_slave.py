"""A slave whose disk fills up (issue 33): its replicated append is refused with nothing
written, it drops the connection, the master drops it from the in-sync set and keeps
acknowledging without it; when space returns the slave reconnects, catches up byte for byte
and rejoins the set. The full disk is ``FaultyFileSystem``'s (every CommitLog write and
allocation on the slave fails until healed)."""

from __future__ import annotations

import time

import pytest

from store import Message
from store.errors import FlushSlaveTimeout
from store.ha import ReplicationMode
from store.io.fs import FaultyFileSystem
from tests.support.replicas import Group, Node, assert_prefix
from tests.support.waiting import wait_until

SYNC = ReplicationMode.SYNC
#: More than a ConsumeQueue file of the tiny layout (64 units): the slave must allocate one.
MESSAGES = 80


def _put_acknowledged(master: Node, body: bytes, timeout_s: float = 10.0) -> None:
    """Put until acknowledged: while the full slave is still in the set, a SYNC put may time
    out waiting for it (stored on the master, not acknowledged)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            master.store.put_message(Message(topic="t", body=body, queue_id=0))
            return
        except FlushSlaveTimeout:
            assert time.monotonic() < deadline, "the master never acknowledged without the full slave"


@pytest.mark.parametrize("full", ["/commitlog/", "/consumequeue/"])
def test_a_slave_with_a_full_disk_leaves_the_set_and_comes_back(group: Group, full: str) -> None:
    """``full``: what cannot grow on the slave: its CommitLog (the append is refused) or its
    ConsumeQueues (the bytes are appended, their dispatch fails: the slave drops out too, as
    it could not serve them, and dispatches them once space returns)."""
    disk = FaultyFileSystem()
    master = group.node(1, replication=SYNC, min_insync=1)
    slave = group.node(2, fs=disk)
    group.elect(master, 1)
    slave.ha.become_slave(master.ha.ha_address, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="the slave in sync")
    master.store.put_message(Message(topic="t", body=b"before", queue_id=0))
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, what="copy")

    for kind in ("write", "allocate"):  # the slave's disk is full
        disk.fail_nth(kind, 1, persistent=True, only=full)
    slave_end = slave.store.commitlog_max_offset
    _put_acknowledged(master, b"during-0")
    wait_until(lambda: master.ha.status().in_sync == {1}, what="the full slave to leave the set")
    for i in range(1, MESSAGES):  # the master is not hurt: acknowledged at once, without the slave
        master.store.put_message(Message(topic="t", body=f"during-{i}".encode(), queue_id=0))
    if full == "/commitlog/":
        assert slave.store.commitlog_max_offset == slave_end  # nothing half-written on the slave
    wait_until(lambda: full in slave.ha.status().last_error, what="the slave to report why")
    assert "No space left" in slave.ha.status().last_error

    disk.heal()  # space returns
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, 15, "the slave to rejoin the set")
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, what="catch up")
    assert_prefix(slave, master)
    wanted = [b"before"] + [f"during-{i}".encode() for i in range(MESSAGES)]
    wait_until(lambda: len(slave.store.get_messages("t", 0, 0, 200).messages) == len(wanted), what="readable")
    assert [m.body for m in slave.store.get_messages("t", 0, 0, 200).messages] == wanted
