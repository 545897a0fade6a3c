"""Replica groups end to end: real broker processes, real ZooKeeper, the HA stream over TCP."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import ProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


def _group(cluster: ProcessCluster, via: str, name: str = "b1") -> dict[str, Any]:
    return next(b for b in cluster.describe(via)["brokers"] if b["name"] == name)


def _roles(cluster: ProcessCluster, via: str) -> dict[int, str]:
    return {m["member_id"]: m["role"] for m in _group(cluster, via).get("members") or []}


def test_failover_keeps_every_acknowledged_message(tmp_path: Path) -> None:
    args = ("--operators", "off", "--replication", "sync", "--min-insync", "1")
    with ProcessCluster.started(tmp_path, []) as cluster:
        first = cluster.add("b1", ha=True, args=args, member="b1-a")
        wait_until(lambda: "master" in _roles(cluster, "b1-a").values(), 30, "b1-a to lead")
        cluster.add("b1", ha=True, args=args, member="b1-b")
        wait_until(
            lambda: (
                sorted(_roles(cluster, "b1-a").values()) == ["master", "slave"]
                and len(_group(cluster, "b1-a")["in_sync"]) == 2
            ),
            30,
            "b1-b in sync",
        )
        with cluster.http("b1-b") as http:  # a slave forwards writes to its master
            assert http.put("/topics/t", json={"queues": 2}).status_code == 201
            assert http.post("/topics/t/messages", json={"body": "seen", "queue_id": 0}).status_code == 201
            route = http.get("/topics/t/route").json()["queues"][0]
            assert route["http"] == first.url and route["replicas"] == [
                first.url,
                cluster.brokers["b1-b"].url,
            ]
            pulled = http.get("/topics/t/queues/0/messages", params={"offset": 0})
            assert pulled.status_code == 307  # a slave sends reads to its master ...
            here = http.get("/topics/t/queues/0/messages", params={"offset": 0, "readFrom": "replica"})
            assert here.status_code == 200  # ... unless asked for a replica read
            wait_until(
                lambda: (
                    [
                        m["body"]
                        for m in http.get(
                            "/topics/t/queues/0/messages", params={"offset": 0, "readFrom": "replica"}
                        ).json()["messages"]
                    ]
                    == ["seen"]
                ),
                10,
                "the replica read",
            )
            acked = ["seen"]
            for i in range(50):
                answer = http.post("/topics/t/messages", json={"body": f"m{i}", "queue_id": i % 2})
                assert answer.status_code == 201, answer.text
                acked.append(f"m{i}")
            half = http.post(
                "/topics/t/messages",
                json={"body": "in a tx", "queue_id": 1, "transaction": {"producer_group": "pg"}},
            )
            assert half.status_code == 201, half.text
            txid = half.json()["transaction_id"]
        epoch_before = _group(cluster, "b1-b")["epoch"]
        first.kill()
        wait_until(
            lambda: _roles(cluster, "b1-b") == {_group(cluster, "b1-b")["members"][0]["member_id"]: "master"},
            30,
            "b1-b to take over",
        )
        assert _group(cluster, "b1-b")["epoch"] == epoch_before + 1
        with cluster.http("b1-b") as http:
            after = http.post("/topics/t/messages", json={"body": "after", "queue_id": 0})
            assert after.status_code == 201, after.text
            # a transaction begun on the old master ends on the new one (its table rebuilt)
            ended = http.post(f"/transactions/{txid}", json={"action": "commit", "producer_group": "pg"})
            assert ended.status_code == 200, ended.text
            acked.append("in a tx")
            bodies = []
            for queue in (0, 1):
                params = {"offset": 0, "max_messages": 100}
                pulled = http.get(f"/topics/t/queues/{queue}/messages", params=params)
                bodies += [m["body"] for m in pulled.json()["messages"]]
        assert sorted(bodies) == sorted([*acked, "after"])
        cluster.restart("b1-a")  # the old master comes back as a slave of the new epoch
        wait_until(
            lambda: sorted(_roles(cluster, "b1-b").values()) == ["master", "slave"], 60, "b1-a to follow"
        )


def test_cluster_status_and_metrics_show_replication(tmp_path: Path) -> None:
    import subprocess
    import sys

    import httpx

    args = ("--operators", "off")
    with ProcessCluster.started(tmp_path, []) as cluster:
        cluster.add("b1", ha=True, args=args, member="b1-a")
        wait_until(lambda: "master" in _roles(cluster, "b1-a").values(), 30, "b1-a to lead")
        cluster.add("b1", ha=True, args=args, member="b1-b")
        wait_until(
            lambda: sorted(_roles(cluster, "b1-a").values()) == ["master", "slave"], 30, "b1-b follows"
        )
        command = [sys.executable, "-m", "sparkmq.cli", "cluster", "status", "--endpoint"]
        status = subprocess.run(
            [*command, cluster.brokers["b1-b"].url], capture_output=True, text=True, timeout=60, check=True
        )
        assert "replicas:" in status.stdout and "master" in status.stdout and "slave" in status.stdout
        metrics = httpx.get(f"{cluster.brokers['b1-a'].url}/metrics", timeout=10).text
        assert 'sparkmq_replication_role{member="' in metrics
        assert "sparkmq_replication_lag_bytes{slave=" in metrics
        assert "sparkmq_replication_became_master_total 1" in metrics
        page = httpx.get(f"{cluster.brokers['b1-b'].url}/console/cluster", timeout=10).text
        assert "Replica groups" in page and ">master<" in page and ">slave<" in page
