"""Consumer offsets across a failover, end to end: real broker processes in a sync replica
group, real ZooKeeper, ``kill -9`` of the master within milliseconds of an acknowledged commit.
The new master must answer that commit (issue 33: it used to answer one a second old)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import ProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

#: A request marked as forwarded by a peer is answered from this member's own table.
LOCAL = {"x-sparkmq-forwarded": "b1"}
ARGS = ("--operators", "off", "--replication", "sync", "--min-insync", "1")


def _group(cluster: ProcessCluster, via: str, name: str = "b1") -> dict[str, Any]:
    return next(b for b in cluster.describe(via)["brokers"] if b["name"] == name)


def _roles(cluster: ProcessCluster, via: str) -> dict[int, str]:
    return {m["member_id"]: m["role"] for m in _group(cluster, via).get("members") or []}


def test_the_new_master_answers_the_commit_acknowledged_just_before_the_kill(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        first = cluster.add("b1", ha=True, args=ARGS, member="b1-a")
        wait_until(lambda: "master" in _roles(cluster, "b1-a").values(), 30, "b1-a to lead")
        cluster.add("b1", ha=True, args=ARGS, member="b1-b")
        wait_until(
            lambda: (
                sorted(_roles(cluster, "b1-a").values()) == ["master", "slave"]
                and len(_group(cluster, "b1-a")["in_sync"]) == 2
            ),
            30,
            "b1-b in sync",
        )
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 2}).status_code == 201
            for i in range(40):
                sent = http.post("/topics/t/messages", json={"body": f"m{i}", "queue_id": i % 2})
                assert sent.status_code == 201, sent.text
            committed: dict[str, int] = {}
            for i in range(1, 21):  # a consumer committing as it goes; the last one is the test
                committed = {"0": i, "1": i - 1}
                answer = http.put("/groups/billing/offsets", json={"topic": "t", "offsets": committed})
                assert answer.status_code == 200, answer.text
            first.kill()  # kill -9 of the master's process group, right after the acknowledgement
        assert first.process is not None and first.process.returncode == -9
        wait_until(lambda: list(_roles(cluster, "b1-b").values()) == ["master"], 30, "b1-b to take over")
        with cluster.http("b1-b") as http:
            answer = http.get("/groups/billing/offsets", params={"topic": "t"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["offsets"] == {"0": 20, "1": 19}
            # the new master takes commits, and the old master, back as a slave, gets them
            again = http.put("/groups/billing/offsets", json={"topic": "t", "offsets": {"1": 20}})
            assert again.status_code == 200, again.text
        cluster.restart("b1-a")
        wait_until(
            lambda: sorted(_roles(cluster, "b1-b").values()) == ["master", "slave"], 60, "b1-a to follow"
        )
        with cluster.http("b1-a") as http:
            wait_until(
                lambda: (
                    http.get("/groups/billing/offsets", params={"topic": "t"}, headers=LOCAL).json()[
                        "offsets"
                    ]
                    == {"0": 20, "1": 20}
                ),
                30,
                "the old master to hold the new master's commit",
            )
