"""Consumer offsets replicated as CommitLog records (``store.write.offset_log``), over real TCP
between real stores: a sync commit returns once the in-sync slaves hold it, a slave promoted
after its master died without a clean close serves it at once, a truncated slave forgets the
commits its new master never had, and a slave that may not write refuses a commit."""

from __future__ import annotations

import time

import pytest

from store import NotMaster
from store.ha import ReplicationMode, ReplicationStatus
from tests.support.replicas import Group, Node
from tests.support.waiting import wait_until

SYNC = ReplicationMode.SYNC


def follow(slave: Node, master: Node, epoch: int) -> None:
    slave.ha.become_slave(master.ha.ha_address, epoch)


def kill(group: Group, node: Node) -> None:
    """The member dies as with ``kill -9``: no flush, no checkpoint, ``abort`` left behind."""
    node.ha.close()
    node.store.abandon()
    group.nodes.pop(node.broker_id, None)


def sync_pair(group: Group) -> tuple[Node, Node]:
    master = group.node(1, replication=SYNC, min_insync=2)
    slave = group.node(2)
    group.elect(master, 1)
    follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="the slave in sync")
    for node in (master, slave):  # topic configs reach every member through the cluster layer
        node.store.create_topic("orders", 4)
    return master, slave


def test_a_sync_commit_is_acknowledged_once_the_slave_holds_it(group: Group) -> None:
    master, slave = sync_pair(group)
    for i in range(1, 30):
        master.store.commit_offsets("billing", "orders", {q: i * 10 + q for q in range(4)})
        end = master.store.commitlog_max_offset
        assert slave.store.commitlog_max_offset >= end  # acknowledged: the slave has the record
        assert master.ha.wait_replicated(end, 0.0) is ReplicationStatus.PUT_OK
    wait_until(
        lambda: slave.store.committed_offsets("billing", "orders") == {q: 290 + q for q in range(4)},
        what="the slave applied the last commit",
    )


def test_a_slave_promoted_after_its_master_died_serves_every_acknowledged_commit(group: Group) -> None:
    master, slave = sync_pair(group)
    master.store.commit_offsets("billing", "orders", {0: 5, 1: 6})
    master.store.commit_offsets("audit", "orders", {3: 1})
    master.store.delete_group_offsets("audit")
    master.store.commit_offsets("billing", "orders", {1: 7})  # acknowledged, then the master dies
    kill(group, master)
    group.elect(slave, 2)
    assert slave.store.committed_offsets("billing", "orders") == {0: 5, 1: 7}  # at once
    assert slave.store.groups() == {"billing": ["orders"]}
    slave.store.commit_offsets("billing", "orders", {0: 8})  # the new master takes commits
    assert slave.store.committed_offsets("billing", "orders") == {0: 8, 1: 7}


def test_a_truncated_slave_forgets_commits_its_new_master_never_had(group: Group) -> None:
    a, b = group.node(1), group.node(2)  # asynchronous: A may write what B never gets
    group.elect(a, 1)
    follow(b, a, 1)
    for node in (a, b):
        node.store.create_topic("orders", 4)
    a.store.commit_offsets("billing", "orders", {0: 1})
    wait_until(lambda: b.store.committed_offsets("billing", "orders") == {0: 1}, what="B has the commit")
    b.ha.fence("partitioned")  # what A writes now only A has
    a.store.commit_offsets("billing", "orders", {0: 99, 2: 5})
    a.ha.fence("deposed")
    group.elect(b, 2)
    b.store.commit_offsets("billing", "orders", {1: 3})
    follow(a, b, 2)  # A is cut back to where epoch 1 ended on B, then catches up
    wait_until(
        lambda: (
            a.store.commitlog_max_offset == b.store.commitlog_max_offset and a.ha.status().truncations == 1
        ),
        what="A truncated and caught up",
    )
    wait_until(
        lambda: a.store.committed_offsets("billing", "orders") == {0: 1, 1: 3},
        what="A's table is B's",
    )
    a.store.flush()  # and its checkpoint says so too, across a restart
    group.stop(a)
    again = group.node(1)
    assert again.store.committed_offsets("billing", "orders") == {0: 1, 1: 3}


def test_a_slave_refuses_a_commit(group: Group) -> None:
    _, slave = sync_pair(group)
    with pytest.raises(NotMaster):
        slave.store.commit_offsets("billing", "orders", {0: 1})


def test_a_slaves_retention_keeps_its_offsets_by_its_checkpoint(group: Group) -> None:
    master, slave = sync_pair(group)
    master.store.commit_offsets("idle", "orders", {0: 3})
    master.store.put_batch("orders", [b"x" * 900] * 300, queue_ids=0)
    wait_until(lambda: slave.store.commitlog_max_offset == master.store.commitlog_max_offset, what="sync")
    later = int(time.time() * 1000) + 7 * 86_400_000
    assert slave.store.run_retention(now_ms=later, force=True) >= 3  # may not write: no record again
    assert slave.store.replica_log().min_offset > 0
    group.stop(slave)
    again = group.node(2)  # reopened from its checkpoint and what its log still holds
    assert again.store.committed_offsets("idle", "orders") == {0: 3}
