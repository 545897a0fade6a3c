"""The gRPC door in a replica group (two ``sparkmq serve --grpc-port`` processes of one broker
name, real ZooKeeper, SYNC replication), driven by RocketMQ 5's official Python client.

The clients' access point is the slave's door: its QueryRoute names the master's door (broker
id 0), so sends and receives go to the master. Then the master is killed (``kill -9``): the
slave is elected, the client's route refresh (every 30 s) moves it to the new master's door,
and the messages acked before the failover are never delivered again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.grpc.door_fixtures import all_messages, in_background
from tests.support.cluster import ProcessCluster
from tests.support.network import free_port
from tests.support.rocketmq5 import run_client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ARGS = ("--operators", "off", "--replication", "sync", "--min-insync", "1")


def _roles(cluster: ProcessCluster, via: str) -> dict[int, str]:
    group = next(b for b in cluster.describe(via)["brokers"] if b["name"] == "b1")
    return {m["member_id"]: m["role"] for m in group.get("members") or []}


def _in_sync(cluster: ProcessCluster) -> bool:
    group = next(b for b in cluster.describe("b1-a")["brokers"] if b["name"] == "b1")
    return sorted(_roles(cluster, "b1-a").values()) == ["master", "slave"] and len(group["in_sync"]) == 2


def test_clients_follow_the_master_through_a_failover(tmp_path: Path, rocketmq5: Path) -> None:
    doors = {"b1-a": free_port(), "b1-b": free_port()}
    home = tmp_path / "home"
    with ProcessCluster.started(tmp_path, []) as cluster:
        cluster.add("b1", ha=True, args=(*ARGS, "--grpc-port", str(doors["b1-a"])), member="b1-a")
        wait_until(lambda: "master" in _roles(cluster, "b1-a").values(), 30, "b1-a to lead")
        cluster.add("b1", ha=True, args=(*ARGS, "--grpc-port", str(doors["b1-b"])), member="b1-b")
        wait_until(lambda: _in_sync(cluster), 30, "b1-b in sync")
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 2}).status_code == 201
        access = f"127.0.0.1:{doors['b1-b']}"
        sent: list[dict[str, Any]] = [{"body": f"m{i}"} for i in range(8)]
        sent += [{"body": f"fifo{i}", "message_group": "g"} for i in range(2)]
        lines = run_client("produce.py", {"endpoint": access, "topic": "t", "messages": sent}, home)
        receipts = [str(line["message_id"]) for line in lines if "message_id" in line]
        assert len(receipts) == 10
        with cluster.http("b1-a") as http:  # the same records, read over HTTP from the master
            assert sorted(m["uniq_key"] for m in all_messages(http, "t")) == sorted(receipts)

        progress, resume = tmp_path / "acked.txt", tmp_path / "resume"
        consume = {
            "endpoint": access,
            "topic": "t",
            "group": "workers",
            "want": 10,
            "batch": 1,
            "invisible_s": 10,
            "ack": True,
            "timeout_s": 150,
            "progress_file": str(progress),
            "pause_after": 5,
            "resume_file": str(resume),
            "tolerate_errors": True,
        }
        join = in_background(lambda: run_client("simple_consume.py", consume, home, timeout_s=200))
        wait_until(
            lambda: progress.exists() and len(progress.read_text().split()) == 5, 60, "five acked messages"
        )
        cluster.brokers["b1-a"].kill()
        wait_until(lambda: list(_roles(cluster, "b1-b").values()) == ["master"], 60, "b1-b elected")
        resume.touch()
        out = join()
    handled = Counter(line["message_id"] for line in out if "message_id" in line)
    assert handled == Counter(receipts)  # each once: no acked message came back after the failover
