"""Faults on real broker processes: kill -9 and restart, ZooKeeper stopped and started."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.cluster import TEST_SESSION_TIMEOUT_MS, ProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


def _alive(cluster: ProcessCluster, via: str) -> dict[str, bool]:
    return {b["name"]: b["alive"] for b in cluster.describe(via)["brokers"]}


def test_killed_broker_is_unavailable_then_rejoins_with_its_queues(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, ["b1", "b2"]) as cluster:
        with cluster.http("b1") as http:
            assert http.put("/topics/t", json={"queues": 4}).status_code == 201
            acked = []
            for queue in range(4):
                answer = http.post("/topics/t/messages", json={"body": f"m{queue}", "queue_id": queue})
                assert answer.status_code == 201, answer.text
                acked.append((queue, answer.json()["broker"]))
        assert acked == [(0, "b1"), (1, "b2"), (2, "b1"), (3, "b2")]
        cluster.brokers["b2"].kill()
        seen_dead = wait_until(
            lambda: not _alive(cluster, "b1")["b2"], TEST_SESSION_TIMEOUT_MS / 1000 * 3, "b2 seen dead"
        )
        assert seen_dead
        with cluster.http("b1") as http:
            refused = http.post("/topics/t/messages", json={"body": "x", "sharding_key": "k3"})
            # whichever queue k3 maps to, a write to b2's queue is refused naming b2
            free = http.post("/topics/t/messages", json={"body": "free"})
            assert free.status_code == 201 and free.json()["broker"] == "b1"
            if refused.status_code != 201:
                assert refused.status_code == 503 and refused.json()["broker"] == "b2"
        cluster.restart("b2")
        cluster.wait_live(2)
        with cluster.http("b2") as http:
            route = http.get("/topics/t/route").json()
            assert [q["broker"] for q in route["queues"]] == ["b1", "b2", "b1", "b2"]
            pulled = http.get("/topics/t/queues/1/messages", params={"offset": 0}).json()
            assert [m["body"] for m in pulled["messages"]] == ["m1"]


def test_zookeeper_down_keeps_produce_and_pull_of_owned_queues(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, ["b1", "b2"]) as cluster:
        with cluster.http("b1") as http:
            assert http.put("/topics/z", json={"queues": 2}).status_code == 201
        with cluster.http("b2") as http:
            # b2 learns the topic from ZooKeeper: stopped before that, b2 would not know z at all
            wait_until(lambda: http.get("/topics/z/route").status_code == 200, 10, "b2 to know topic z")
        cluster.zookeeper.stop()
        with cluster.http("b1") as http:
            stored = http.post("/topics/z/messages", json={"body": "while zk is down", "queue_id": 0})
            assert stored.status_code == 201, stored.text
            forwarded = http.post("/topics/z/messages", json={"body": "to b2", "queue_id": 1})
            assert forwarded.status_code == 201 and forwarded.json()["broker"] == "b2", forwarded.text
            pulled = http.get("/topics/z/queues/0/messages", params={"offset": 0}).json()
            assert [m["body"] for m in pulled["messages"]] == ["while zk is down"]
            refused = wait_until(
                lambda: (r := http.put("/topics/new", json={"queues": 2})).status_code == 503 and r, 10, "503"
            )
            assert refused.json()["error"] == "cluster_unavailable"
            assert "ZooKeeper" in refused.json()["message"]
        cluster.zookeeper.start()
        with cluster.http("b1") as http:
            created = wait_until(
                lambda: _try_put(http, "/topics/new", {"queues": 2}),
                30,
                "topic creation after ZooKeeper returns",
            )
            assert created.status_code == 201
        cluster.wait_live(2)


def _try_put(http: httpx.Client, path: str, body: dict[str, int]) -> httpx.Response | None:
    answer = http.put(path, json=body)
    return answer if answer.status_code in (200, 201) else None


def test_duplicate_broker_name_is_refused_at_start(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, ["b1"]) as cluster:
        duplicate = cluster.add("b1", member="b1-again", wait=False)
        assert duplicate.process is not None
        code = duplicate.process.wait(timeout=90)
        assert code != 0
        assert "already live" in duplicate.log_tail() and "--broker-name" in duplicate.log_tail()


def test_malformed_cluster_address_exits_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", str(tmp_path), "--cluster", "zk://nohost",
         "--broker-name", "b1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "needs HOST:PORT" in done.stderr
