"""A master failover in a replica group loses no answered ack (real replication on 127.0.0.1).

The POP state records travel in the CommitLog like messages: with SYNC replication an ack is
answered only once the slave holds its record. After the master is deposed and the slave
elected, the new master's table (rebuilt from the replicated state topic) knows the acked
handles as acked (an ack retried after a lost answer is answered ok again, and the message is
not delivered again), accepts the old master's other handles (the signing secret is replicated
too), and hands out exactly the messages never delivered.
"""

from __future__ import annotations

from pathlib import Path

from broker.pop import PopConfig, PopService, Received
from store import Message
from store.ha import ReplicationMode
from tests.support.replicas import Group
from tests.support.waiting import wait_until


def test_failover_keeps_every_answered_ack(tmp_path: Path) -> None:
    group = Group(tmp_path)
    try:
        master = group.node(1, replication=ReplicationMode.SYNC, min_insync=2)
        slave = group.node(2)
        group.elect(master, 1)
        slave.ha.become_slave(master.ha.ha_address, 1)
        wait_until(lambda: master.ha.status().in_sync == {1, 2}, what="slave in sync")
        for node in (master, slave):
            node.store.create_topic("t", 2)
        on_slave = PopService(slave.store, PopConfig(background=False))  # a replica: no state yet
        service = PopService(master.store, PopConfig(background=False))
        master.store.put_messages([Message(topic="t", body=b"m%d" % i) for i in range(50)])
        got: list[Received] = []
        while len(got) < 20:
            got += service.receive("g", "t", 32 if len(got) < 16 else 20 - len(got), 600_000)
        acked, pending = got[:10], got[10:20]
        assert all(r.ok for r in service.ack("g", [r.receipt_handle for r in acked]))
        service.close()
        master.ha.fence("deposed")
        group.elect(slave, 2)
        on_slave.reload()
        answers = on_slave.ack("g", [r.receipt_handle for r in acked + pending])
        assert all(a.ok for a in answers[:10]), answers[:10]  # acked before: idempotent
        assert all(a.ok for a in answers[10:]), answers[10:]
        rest: list[bytes] = []
        while batch := on_slave.receive("g", "t", 32, 600_000):
            rest += [r.message.body for r in batch]
        delivered = {r.message.body for r in got}
        assert sorted(rest) == sorted({b"m%d" % i for i in range(50)} - delivered)
        on_slave.close()
    finally:
        group.close()
