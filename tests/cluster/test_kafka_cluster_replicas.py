"""Kafka Metadata of a replica group, as a real Kafka client reads it (confluent-kafka's
``list_topics``): each partition's replicas are the group's members and its ISR the in-sync set,
through a master ``kill -9`` and the old master's return. Real processes, a real ZooKeeper."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.cluster import ProcessBroker, ProcessCluster
from tests.support.replica_pair import ReplicaPair
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]


def _partitions(broker: ProcessBroker) -> list[tuple[int, list[int], list[int]]]:
    """``(leader, replicas, isrs)`` of every partition of topic ``t``, asked of ``broker``."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.kafka_port}"})
    topic: Any = admin.list_topics("t", timeout=15).topics["t"]
    return [(p.leader, list(p.replicas), list(p.isrs)) for _, p in sorted(topic.partitions.items())]


def test_metadata_lists_a_replica_groups_members_and_its_in_sync_set(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1", kafka=True)
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 2}).status_code == 201
        ids = {m["http"]: m["member_id"] for m in pair.group_seen_by(pair.master)["members"]}
        first, second = ids[pair.master.url], ids[pair.slave.url]
        both = (first, [first, second], sorted([first, second]))
        assert [(lead, reps, sorted(isr)) for lead, reps, isr in _partitions(pair.master)] == [both, both]

        pair.master.kill()
        pair.wait_led_by(pair.slave)
        wait_until(
            lambda: all(p[0] == second and p[2] == [second] for p in _partitions(pair.slave)),
            60,
            "the new leader alone in sync",
        )
        assert all(reps[0] == second for _, reps, _ in _partitions(pair.slave))

        cluster.restart("b1-a")  # back as a slave: a replica again, in sync once caught up
        wait_until(
            lambda: (
                _partitions(pair.slave) == [(second, [second, first], [second, first])] * 2
                or _partitions(pair.slave) == [(second, [second, first], [first, second])] * 2
            ),
            60,
            "the old master back in the ISR",
        )
