"""The exactly-once sink's client (what Spark's tasks and driver use in endpoint mode) across a
replica group's failover: a part staged at the master, the master killed with ``kill -9``
before the commit, the commit taken by the promoted slave, every row once. Real ``sparkmq
serve`` processes, a real ZooKeeper. Marked ``cluster``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sparkmq.client import Client
from store.publish import StagedPart
from store.publish.sink_parts import new_part_id, write_part
from streaming.sink_client import SinkClient
from tests.streaming.eo_helpers import assert_exactly_once, part_batch
from tests.support.cluster import ProcessCluster
from tests.support.replica_pair import ReplicaPair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

SINK = "failover-sink"


@contextmanager
def _group_with_topic(tmp_path: Path) -> Iterator[ReplicaPair]:
    """A replica pair ``b1`` in sync (a real ZooKeeper), with topic ``out`` of two queues."""
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1")
        with Client(pair.master.url) as client:
            client.create_topic("out", 2)
        yield pair


def _payload(tmp_path: Path, bodies: list[bytes]) -> bytes:
    """A staged part (Arrow IPC file) of ``bodies`` for topic ``out``."""
    part = tmp_path / "part.arrow"
    write_part(part, [part_batch(bodies, "out")])
    return part.read_bytes()


def _all_bodies(client: Client, topic: str, queues: int) -> list[bytes]:
    bodies: list[bytes] = []
    for queue_id in range(queues):
        offset = 0
        while True:
            got = client.pull(topic, queue_id, offset, max_messages=100).messages
            if not got:
                break
            bodies += [m.body for m in got]
            offset = got[-1].queue_offset + 1
    return bodies


def test_a_part_staged_at_a_killed_master_is_committed_at_its_slave(tmp_path: Path) -> None:
    bodies = [b"row-%04d" % i for i in range(40)]
    with _group_with_topic(tmp_path) as pair:
        payload = _payload(tmp_path, bodies)
        sink = SinkClient(pair.master.url, None, timeout_s=5, retry_timeout_s=90)  # the master only
        part_id = new_part_id(0, 0)
        rows = sink.put_part(SINK, 0, part_id, payload)
        pair.master.kill()  # after the part was acknowledged (sync), before the commit
        # The client moves to the slave at once; until it leads, its answers are retriable
        # (it may decide there, as a slave coordinator does, and publish once it leads).
        answer = sink.commit(SINK, 0, [StagedPart(part_id, rows)])
        assert (answer["rows"], answer["already_published"]) == (40, False), answer
        pair.wait_led_by(pair.slave)
        with Client(pair.slave.url) as client:
            assert_exactly_once(_all_bodies(client, "out", 2), bodies)
        assert sink.commit(SINK, 0, [StagedPart(part_id, rows)])["already_published"]


def test_a_client_given_the_slave_stages_and_commits_at_the_master(tmp_path: Path) -> None:
    """Only a group's master stages and decides: the slave answers ``503 not_master`` and the
    client goes to the group's master (it learnt the members from ``GET /cluster``)."""
    bodies = [b"row-%04d" % i for i in range(10)]
    with _group_with_topic(tmp_path) as pair:
        payload = _payload(tmp_path, bodies)
        sink = SinkClient(pair.slave.url, None, timeout_s=5, retry_timeout_s=30)
        part_id = new_part_id(0, 0)
        rows = sink.put_part(SINK, 0, part_id, payload)
        assert sink.commit(SINK, 0, [StagedPart(part_id, rows)])["rows"] == 10
        with Client(pair.master.url) as client:
            assert_exactly_once(_all_bodies(client, "out", 2), bodies)


def test_a_client_pinned_to_a_master_that_was_paused_and_demoted_follows_the_new_one(tmp_path: Path) -> None:
    """The master paused past its session (``SIGSTOP``): its slave leads; resumed, the old master
    is a slave and answers ``503 not_master``; the client that staged there moves on."""
    bodies = [b"row-%04d" % i for i in range(10)]
    with _group_with_topic(tmp_path) as pair:
        payload = _payload(tmp_path, bodies)
        sink = SinkClient(pair.master.url, None, timeout_s=5, retry_timeout_s=60)
        first = new_part_id(0, 0)
        first_rows = sink.put_part(SINK, 0, first, payload)
        assert sink.commit(SINK, 0, [StagedPart(first, first_rows)])["rows"] == 10
        pair.master.pause()
        pair.wait_led_by(pair.slave)
        pair.master.resume()
        wait_until(
            lambda: pair.roles_seen_by(pair.master).get(pair.master.url) == "slave",
            60,
            "the old master to follow",
        )
        second = new_part_id(0, 0)
        rows = sink.put_part(SINK, 1, second, payload)
        assert sink.commit(SINK, 1, [StagedPart(second, rows)])["rows"] == 10
        with Client(pair.slave.url) as client:
            assert sorted(_all_bodies(client, "out", 2)) == sorted(bodies * 2)
