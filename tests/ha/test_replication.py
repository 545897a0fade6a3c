"""Replication over real TCP on 127.0.0.1 between real stores: byte-identical CommitLogs and
ConsumeQueues across file rolls, SYNC acknowledgements that wait for every in-sync member and time
out when one stalls, refusals that write nothing, readers bounded by the confirm offset, fencing,
and the epoch checks on both sides of the wire."""

from __future__ import annotations

import random
import threading
import time

import pytest

from store import FlushDiskType, GetStatus, Message, ProducerRef, StoreReader
from store.errors import FlushSlaveTimeout, NotMaster, ReplicaFenced, SlaveNotAvailable
from store.ha import EpochEntry, ReplicationMode, ReplicationStatus, Role, StaleEpoch
from store.ha.frames import TransferHeader
from tests.support.replicas import FakeMaster, FakeSlave, Group, Node, assert_prefix, commitlog_files
from tests.support.waiting import wait_until

SYNC = ReplicationMode.SYNC


def follow(slave: Node, master: Node, epoch: int) -> None:
    slave.ha.become_slave(master.ha.ha_address, epoch)


def caught_up(slave: Node, master: Node) -> bool:
    return (
        slave.store.commitlog_max_offset == master.store.commitlog_max_offset
        and slave.store.confirm_offset == master.store.confirm_offset
    )


def write_mixed(node: Node, rounds: int, seed: int, prefix: str = "k") -> None:
    """Batches and single messages of varied sizes over two topics and several queues."""
    rng = random.Random(seed)
    for i in range(rounds):
        bodies = [rng.randbytes(rng.randrange(40, 2500)) for _ in range(rng.randrange(1, 6))]
        node.store.put_batch(
            "orders",
            bodies,
            queue_ids=[rng.randrange(3) for _ in bodies],
            keys=[f"{prefix}{i}-{j}" for j in range(len(bodies))],
        )
        node.store.put_message(
            Message(topic="audit", body=rng.randbytes(300), tags="a", keys=(f"{prefix}a{i}",))
        )


def consume_queue_files(node: Node) -> dict[str, bytes]:
    root = node.directory / "consumequeue"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_slaves_hold_byte_identical_logs_and_queues(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=3)
    slaves = [group.node(2), group.node(3)]
    group.elect(master, 1)
    for slave in slaves:
        follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2, 3}, what="both slaves in sync")
    write_mixed(master, 120, seed=1)
    assert len(commitlog_files(master.directory)) >= 4  # several 64 KiB files rolled (BLANK ends)
    for slave in slaves:
        wait_until(lambda s=slave: caught_up(s, master), what="slave caught up")
        assert commitlog_files(slave.directory) == commitlog_files(master.directory)
        assert consume_queue_files(slave) == consume_queue_files(master)
        for topic in ("orders", "audit"):
            for queue_id, (lo, hi) in master.store.queue_offsets(topic).items():
                if hi:
                    assert slave.store.max_offset(topic, queue_id) == hi
                    mine = slave.store.read_batch(topic, queue_id, lo, 10_000).batch
                    assert mine.equals(master.store.read_batch(topic, queue_id, lo, 10_000).batch)
        assert [m.queue_offset for m in slave.store.query_by_key("orders", "k7-0")] == [
            m.queue_offset for m in master.store.query_by_key("orders", "k7-0")
        ]
        assert slave.ha.status().role is Role.SLAVE
        assert slave.ha.epochs.entries == master.ha.epochs.entries == (EpochEntry(1, 0),)


def test_a_sync_put_returns_only_once_every_in_sync_member_holds_it(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=3)
    slaves = [group.node(2), group.node(3)]
    group.elect(master, 1)
    for slave in slaves:
        follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2, 3}, what="both slaves in sync")
    for i in range(30):
        result = master.store.put_message(Message(topic="t", body=b"x" * (i + 1)))
        end = result.commitlog_offset + result.size_bytes
        assert all(slave.store.commitlog_max_offset >= end for slave in slaves)
        assert master.ha.wait_replicated(end, 0.0) is ReplicationStatus.PUT_OK
    status = master.ha.status()
    assert {s.broker_id for s in status.slaves} == {2, 3}
    assert all(s.in_sync and s.lag_bytes == 0 for s in status.slaves)


def test_a_stalled_in_sync_slave_times_the_write_out_and_hides_it(group: Group) -> None:
    master = group.node(
        1,
        replication=SYNC,
        min_insync=2,
        ack_timeout_ms=300,
        max_time_slave_not_catchup_ms=60_000,
        housekeeping_interval_ms=60_000,
    )
    group.elect(master, 1)
    fake = FakeSlave(master.ha.ha_address, broker_id=9)
    fake.ack(0)  # a new replica at the empty master's end: it joins the in-sync set
    wait_until(lambda: master.ha.status().in_sync == {1, 9}, what="the fake slave in sync")
    fake.start_reading()
    try:
        heard: list[tuple[str, int, int]] = []
        master.store.add_arrival_listener(lambda t, q, m: heard.append((t, q, m)))
        with pytest.raises(FlushSlaveTimeout) as timed_out:
            master.store.put_message(Message(topic="t", body=b"late", queue_id=0))
        assert timed_out.value.status == "FLUSH_SLAVE_TIMEOUT"
        end = timed_out.value.end_offset
        assert master.store.commitlog_max_offset == end  # stored, not acknowledged, not visible
        assert master.store.confirm_offset == 0
        assert master.store.max_offset("t", 0) == 0
        assert master.store.get_messages("t", 0, 0).status is GetStatus.NO_NEW_MESSAGE
        assert master.store.read_batch("t", 0, 0, 10).num_messages == 0
        assert not master.store.wait_for_message("t", 0, 0, timeout_s=0.2)
        with StoreReader(master.directory) as follower:
            assert follower.queue_offsets("t")[0] == (0, 0)
            assert follower.read_batch("t", 0, 0, 10).num_messages == 0
            assert heard == []
            wait_until(lambda: fake.received_end() == end, what="the frame reached the fake slave")
            fake.ack(end)  # it catches up: now every in-sync member holds the write
            wait_until(lambda: master.store.max_offset("t", 0) == 1, what="the record visible")
            # a follower in another process learns the move from the checkpoint, written just after
            wait_until(lambda: follower.read_batch("t", 0, 0, 10).num_messages == 1, what="the follower")
        # the notice goes out just after the bound moves (outside its lock): it may trail the read
        wait_until(lambda: heard == [("t", 0, 1)], what="the arrival notice")
        assert master.ha.wait_replicated(end, 0.0) is ReplicationStatus.PUT_OK
    finally:
        fake.close()


def test_below_min_insync_nothing_is_written(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=2)
    group.elect(master, 1)
    assert master.ha.can_accept_write() is ReplicationStatus.SLAVE_NOT_AVAILABLE
    assert master.ha.can_accept_write(min_insync=1) is ReplicationStatus.PUT_OK
    for attempt in (
        lambda: master.store.put_message(Message(topic="new-topic", body=b"x")),
        lambda: master.store.put_batch("new-topic", [b"a", b"b"]),
    ):
        with pytest.raises(SlaveNotAvailable) as refused:
            attempt()
        assert refused.value.status == "SLAVE_NOT_AVAILABLE"
        assert not refused.value.appended
    assert master.store.commitlog_max_offset == 0
    assert not master.store.has_topic("new-topic")
    assert master.store.replica_log().queue_max_offsets() == {}
    slave = group.node(2)
    follow(slave, master, 1)
    wait_until(lambda: master.ha.can_accept_write() is ReplicationStatus.PUT_OK, what="a slave in sync")
    master.store.put_message(Message(topic="new-topic", body=b"x"))
    assert slave.store.commitlog_max_offset == master.store.commitlog_max_offset


def test_a_lost_slave_leaves_the_set_and_writes_are_refused_again(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=2)
    slave = group.node(2)
    group.elect(master, 1)
    follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="slave in sync")
    master.store.put_message(Message(topic="t", body=b"x"))
    group.stop(slave)
    wait_until(lambda: master.ha.status().in_sync == {1}, what="the set shrank")
    with pytest.raises(SlaveNotAvailable):
        master.store.put_message(Message(topic="t", body=b"y"))
    assert group.authority.state is not None and group.authority.state.members == {1}


def test_fencing_refuses_writes_and_releases_waiting_acknowledgements(group: Group) -> None:
    master = group.node(
        1, replication=SYNC, min_insync=2, ack_timeout_ms=30_000, housekeeping_interval_ms=60_000
    )
    group.elect(master, 1)
    fake = FakeSlave(master.ha.ha_address, broker_id=9)
    fake.ack(0)
    wait_until(lambda: master.ha.status().in_sync == {1, 9}, what="the fake slave in sync")
    fake.start_reading()
    outcome: list[BaseException] = []

    def put() -> None:
        try:
            master.store.put_message(Message(topic="t", body=b"x"))
        except BaseException as exc:
            outcome.append(exc)

    writer = threading.Thread(target=put)
    writer.start()
    wait_until(lambda: fake.received_end() > 0, what="the write sent to the slave")
    started = time.monotonic()
    master.ha.fence("zookeeper SUSPENDED")
    writer.join(10)
    assert time.monotonic() - started < 5  # far below the 30 s ack timeout
    assert len(outcome) == 1 and isinstance(outcome[0], ReplicaFenced)
    with pytest.raises(ReplicaFenced):
        master.store.put_message(Message(topic="t", body=b"y"))
    fake.ack(fake.received_end())  # a late ack moves nothing on a fenced master
    time.sleep(0.2)
    assert master.store.confirm_offset == 0
    assert master.ha.status().role is Role.FENCED
    assert master.ha.wait_replicated(1, 0.1) is ReplicationStatus.SERVICE_NOT_AVAILABLE
    fake.close()


def test_role_changes_refuse_stale_epochs(group: Group) -> None:
    node = group.node(1)
    group.elect(node, 5)
    with pytest.raises(StaleEpoch):
        node.ha.become_master(4)
    with pytest.raises(StaleEpoch):
        node.ha.become_slave("127.0.0.1:1", 4)
    node.ha.fence("suspended")
    group.elect(node, 5)  # resuming the epoch it led is allowed
    other = group.node(2)
    follow(other, node, 5)
    wait_until(lambda: other.ha.epochs.entries == (EpochEntry(5, 0),), what="the slave learning epoch 5")
    with pytest.raises(StaleEpoch):  # an epoch it has an entry for but did not lead
        other.ha.become_master(5)
    assert node.ha.epochs.entries == (EpochEntry(5, 0),)


def test_a_slave_rejects_frames_of_an_older_epoch(group: Group) -> None:
    slave = group.node(2)
    fake = FakeMaster(epoch=3, entries=[EpochEntry(3, 0)], max_offset=0)
    fake.send_after_first_ack(TransferHeader(0, 0, 3, 0, 0))  # a heartbeat of epoch 3
    fake.send_after_first_ack(TransferHeader(0, 0, 2, 0, 0))  # then a deposed master's epoch 2
    slave.ha.become_slave(fake.address, 3)
    try:
        wait_until(fake.closed_by_slave.is_set, what="the slave dropping the connection")
        wait_until(lambda: slave.ha.status().stale_frames_rejected == 1, what="the rejection counted")
        assert "StaleEpochFrame" in slave.ha.status().last_error
        assert slave.ha.epochs.entries == (EpochEntry(3, 0),)
        assert slave.store.commitlog_max_offset == 0
    finally:
        slave.ha.fence("test over")
        fake.close()


def test_a_slave_refuses_a_master_with_an_older_epoch(group: Group) -> None:
    slave = group.node(2)
    fake = FakeMaster(epoch=4, entries=[EpochEntry(4, 0)], max_offset=0)
    slave.ha.become_slave(fake.address, 5)
    try:
        wait_until(fake.closed_by_slave.is_set, what="the slave hanging up")
        assert fake.acks == []  # it never acknowledged anything to the deposed master
        wait_until(lambda: "StaleMaster" in slave.ha.status().last_error, what="the refusal recorded")
    finally:
        slave.ha.fence("test over")
        fake.close()


def test_a_slave_refuses_writes(group: Group) -> None:
    master, slave = group.node(1), group.node(2)
    group.elect(master, 1)
    follow(slave, master, 1)
    with pytest.raises(NotMaster):
        slave.store.put_message(Message(topic="t", body=b"x"))


def test_lagging_slave_and_returning_old_master_converge(group: Group) -> None:
    a, b, c = group.node(1), group.node(2), group.node(3)
    group.elect(a, 1)
    follow(b, a, 1)
    follow(c, a, 1)
    write_mixed(a, 20, seed=11, prefix="one")
    wait_until(lambda: caught_up(b, a) and caught_up(c, a), what="both slaves caught up")
    c.ha.fence("lagging")  # C falls behind
    write_mixed(a, 20, seed=12, prefix="two")
    wait_until(lambda: caught_up(b, a), what="B caught up")
    b.ha.fence("partitioned")  # B stops: what A writes now only A has
    divergent_from = a.store.commitlog_max_offset
    write_mixed(a, 15, seed=13, prefix="lost")
    a.ha.fence("deposed")
    group.elect(b, 2)  # B becomes master of epoch 2 at the end of what it holds
    assert b.ha.epochs.entries == (EpochEntry(1, 0), EpochEntry(2, divergent_from))
    write_mixed(b, 20, seed=14, prefix="three")
    follow(c, b, 2)  # the lagging slave: nothing to truncate, it catches up
    follow(a, b, 2)  # the old master: cut where epoch 1 ended on B, then catch up
    for node in (a, c):
        wait_until(lambda n=node: caught_up(n, b), what=f"broker {node.broker_id} caught up")
        assert commitlog_files(node.directory) == commitlog_files(b.directory)
        assert consume_queue_files(node) == consume_queue_files(b)
        assert node.ha.epochs.entries == b.ha.epochs.entries
    assert a.ha.status().truncations == 1
    assert a.ha.status().truncated_bytes > 0
    assert c.ha.status().truncations == 0
    assert a.store.query_by_key("orders", "lost3-0") == []  # the divergent tail is gone, index too
    assert [m.queue_offset for m in a.store.query_by_key("orders", "three3-0")] == [
        m.queue_offset for m in b.store.query_by_key("orders", "three3-0")
    ]
    # a second failover: C leads epoch 3, B (the old master of epoch 2) rejoins
    b.ha.fence("killed")
    group.elect(c, 3)
    write_mixed(c, 10, seed=15, prefix="four")
    follow(b, c, 3)
    follow(a, c, 3)
    for node in (a, b):
        wait_until(lambda n=node: caught_up(n, c), what=f"broker {node.broker_id} caught up with C")
        assert commitlog_files(node.directory) == commitlog_files(c.directory)
        assert_prefix(node, c)


def test_concurrent_sync_producers_are_each_acknowledged_once_replicated(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=2)
    slave = group.node(2)
    group.elect(master, 1)
    follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="slave in sync")
    failures: list[BaseException] = []
    late: list[int] = []

    def produce(worker: int) -> None:
        try:
            for i in range(40):
                result = master.store.put_message(Message(topic="t", body=b"%d-%d" % (worker, i)))
                end = result.commitlog_offset + result.size_bytes
                if slave.store.commitlog_max_offset < end:
                    late.append(end)
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=produce, args=(w,)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert failures == [] and late == []
    wait_until(lambda: caught_up(slave, master), what="slave caught up")
    assert sum(hi for _, hi in slave.store.queue_offsets("t").values()) == 320


def test_resuming_an_epoch_keeps_the_in_sync_set_the_cluster_holds(group: Group, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    master = group.node(1, replication=SYNC, min_insync=1, ack_timeout_ms=300)
    slave = group.node(2)
    group.elect(master, 1)
    follow(slave, master, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="slave in sync")
    master.ha.fence("zookeeper SUSPENDED")
    slave.ha.fence("partitioned from the master")
    state = group.authority.state
    assert state is not None and state.members == {1, 2}
    approve = group.authority.propose
    monkeypatch.setattr(group.authority, "propose", lambda *args: False)  # ZooKeeper refuses for now
    master.ha.become_master(1, state.set_epoch, state.members)  # RECONNECTED, the epoch still ours
    with pytest.raises(FlushSlaveTimeout):  # the set still holds the silent slave: no acknowledgement
        master.store.put_message(Message(topic="t", body=b"x"))
    assert master.store.confirm_offset < master.store.commitlog_max_offset
    assert master.ha.status().sync_state_refusals >= 1
    monkeypatch.setattr(group.authority, "propose", approve)
    wait_until(lambda: master.ha.status().in_sync == {1}, what="the set shrinking without it")
    wait_until(lambda: master.store.confirm_offset == master.store.commitlog_max_offset, what="confirm")
    assert (master.ha.last_epoch, master.ha.max_offset) == (1, master.store.commitlog_max_offset)


def test_an_idempotent_retry_is_not_a_success_until_replicated(group: Group) -> None:
    master = group.node(
        1,
        replication=SYNC,
        min_insync=2,
        ack_timeout_ms=300,
        max_time_slave_not_catchup_ms=60_000,
        housekeeping_interval_ms=60_000,
    )
    group.elect(master, 1)
    fake = FakeSlave(master.ha.ha_address, broker_id=9)
    fake.ack(0)
    wait_until(lambda: master.ha.status().in_sync == {1, 9}, what="the fake slave in sync")
    fake.start_reading()
    ref = ProducerRef("producer-1", 7)
    messages = [Message(topic="t", body=b"once", queue_id=0), Message(topic="t", body=b"twice", queue_id=0)]
    try:
        with pytest.raises(FlushSlaveTimeout):
            master.store.put_messages(messages, producer=ref)
        end = master.store.commitlog_max_offset
        with pytest.raises(FlushSlaveTimeout):  # stored, found by the retry, still not replicated
            master.store.put_messages(messages, producer=ref)
        assert master.store.commitlog_max_offset == end  # and not written twice
        wait_until(lambda: fake.received_end() == end, what="the frames reached the fake slave")
        fake.ack(end)
        results = master.store.put_messages(messages, producer=ref)
        assert [r.queue_offset for r in results] == [0, 1]
        assert master.store.commitlog_max_offset == end
    finally:
        fake.close()


def test_a_sync_flush_slave_acknowledges_only_what_it_fsynced(group: Group) -> None:
    master = group.node(1, replication=SYNC, min_insync=2)
    slave = group.node(2, store={"flush_disk_type": FlushDiskType.SYNC_FLUSH})
    group.elect(master, 1)
    slave.ha.become_slave(master.ha.ha_address, 1)
    wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="the slave in sync")
    for i in range(50):
        result = master.store.put_message(Message(topic="t", body=b"y" * (100 + i)))
        assert slave.store.stats().commitlog_flushed_offset >= result.commitlog_offset + result.size_bytes
