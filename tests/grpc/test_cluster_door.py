"""The gRPC door in a replica group (two ``sparkmq serve --grpc-port`` processes of one broker
name, real ZooKeeper, SYNC replication), driven by RocketMQ 5's official Python client.

The clients' access point is the slave's door: its QueryRoute names the master's door (broker
id 0), so sends and receives go to the master. Then the master is killed (``kill -9``): the
slave is elected, the client's route refresh (every 30 s) moves it to the new master's door,
and the messages acked before the failover are never delivered again. Before that: normal,
FIFO, delayed and transactional sends (commit, rollback, a check-back), two push consumers
sharing a group, an unacked message back as attempt 2, a changed invisible time."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.grpc.door_fixtures import answer_check_back, in_background
from tests.support.cluster import ProcessCluster
from tests.support.network import free_port
from tests.support.reads import all_messages
from tests.support.rocketmq5 import run_client
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

ARGS = ("--operators", "off", "--replication", "sync", "--min-insync", "1")


def test_clients_follow_the_master_through_a_failover(tmp_path: Path, rocketmq5: Path) -> None:
    doors = {"b1-a": free_port(), "b1-b": free_port()}
    home = tmp_path / "home"
    with ProcessCluster.started(tmp_path, []) as cluster:
        cluster.add("b1", ha=True, args=(*ARGS, "--grpc-port", str(doors["b1-a"])), member="b1-a")
        wait_until(lambda: "master" in cluster.roles("b1-a").values(), 30, "b1-a to lead")
        cluster.add("b1", ha=True, args=(*ARGS, "--grpc-port", str(doors["b1-b"])), member="b1-b")
        wait_until(lambda: cluster.pair_in_sync("b1-a"), 30, "b1-b in sync")
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 2}).status_code == 201
        access = f"127.0.0.1:{doors['b1-b']}"
        sent: list[dict[str, Any]] = [{"body": f"m{i}"} for i in range(8)]
        sent += [{"body": f"fifo{i}", "message_group": "g"} for i in range(2)]
        sent += [{"body": "tomorrow", "delivery_timestamp": int(time.time()) + 86_000}]
        lines = run_client("produce.py", {"endpoint": access, "topic": "t", "messages": sent}, home)
        receipts = [str(line["message_id"]) for line in lines if "message_id" in line]
        assert len(receipts) == 11
        delayed = receipts.pop()
        with cluster.http("b1-a") as http:  # the same records, read over HTTP from the master
            stored = {m["uniq_key"]: m for m in all_messages(http, "t")}
            assert sorted(stored) == sorted(receipts)  # the delayed one is parked
            assert len({stored[r]["queue_id"] for r in receipts[8:]}) == 1  # one message group, one queue
            assert delayed not in stored

            join_tx = in_background(
                lambda: run_client(
                    "transact.py", {"endpoint": access, "topic": "pay", "rollback": True}, home
                )
            )
            txid = answer_check_back(http, "pay", batch_id=0, sent=3)
            by_kind = {next(iter(line)): line for line in join_tx()}
            assert by_kind["checked"]["checked"] == [txid]
            wait_until(lambda: len(all_messages(http, "pay")) == 2, 10, "the commit and the checked commit")

        pushed = run_client(
            "push_consume.py",
            {
                "endpoint": access,
                "topic": "t",
                "group": "pushers",
                "consumers": 2,
                "want": 10,
                "timeout_s": 60,
                "settle_s": 3,
            },
            home,
        )
        counts = Counter(line["message_id"] for line in pushed if "message_id" in line)
        assert counts == Counter(receipts)  # two push consumers of a group: each message once

        one = {"endpoint": access, "topic": "once", "messages": [{"body": "one"}]}
        assert len(run_client("produce.py", one, home)) == 2  # the receipt and the settings line
        unacked = {"endpoint": access, "topic": "once", "group": "flaky", "want": 1, "timeout_s": 20}
        unacked |= {"invisible_s": 2, "ack": False, "batch": 1}
        first, second = (
            [line for line in run_client("simple_consume.py", unacked, home) if "message_id" in line]
            for _ in range(2)
        )
        assert first[0]["message_id"] == second[0]["message_id"]  # back after its invisible time
        assert (first[0]["attempt"], second[0]["attempt"]) == (1, 2)
        changed = run_client(
            "simple_consume.py",
            {**unacked, "group": "patient", "change_invisible_s": 30, "hold_s": 3, "ack": True},
            home,
        )
        assert changed[0] == {"received_while_hidden": 0} and changed[-1] == {"done": 1}

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
        wait_until(lambda: list(cluster.roles("b1-b").values()) == ["master"], 60, "b1-b elected")
        resume.touch()
        out = join()
    handled = Counter(line["message_id"] for line in out if "message_id" in line)
    assert handled == Counter(receipts)  # each once: no acked message came back after the failover
