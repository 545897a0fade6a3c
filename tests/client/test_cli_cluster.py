"""The ``sparkmq`` commands on the route-aware client: ``--endpoint`` beside ``SPARKMQ_URL``,
``cluster status``, and produce/consume/describe across three brokers of one cluster."""

from __future__ import annotations

import json
from typing import Any

import httpx
from typer.testing import CliRunner, Result

from sparkmq.cli import app
from store import sharding_queue
from tests.cluster.inprocess import InProcessCluster
from tests.ingest.conftest import RunningBroker

runner = CliRunner()


def ok(result: Result) -> Result:
    assert result.exit_code == 0, result.output
    return result


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(result).stdout.splitlines() if line.startswith("{")]


def test_cluster_status_of_a_lone_broker(lone_broker: RunningBroker, topic: str) -> None:
    ok(runner.invoke(app, ["topics", "create", topic, "--queues", "2", "--endpoint", lone_broker.url]))
    shown = ok(
        runner.invoke(app, ["cluster", "status", "--topic", topic], env={"SPARKMQ_URL": lone_broker.url})
    )
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("single mode: 1 of 1 brokers alive")
    assert lines[1].split() == ["NAME", "ALIVE", "HTTP", "KAFKA", "QUEUES"]
    assert lines[2].split()[:3] == ["local", "True", lone_broker.url]
    assert [line.split()[:2] for line in lines[-2:]] == [["0", "local"], ["1", "local"]]
    document = json.loads(
        ok(runner.invoke(app, ["cluster", "status", "-o", "json", "--url", lone_broker.url])).stdout
    )
    assert document["mode"] == "single" and document["self"] == "local"


def test_bad_endpoint_is_a_usage_error() -> None:
    refused = runner.invoke(app, ["topics", "list", "--endpoint", "127.0.0.1:8080"])
    assert refused.exit_code == 2 and "http(s) URL" in refused.output


def test_commands_across_three_brokers(trio: InProcessCluster) -> None:
    b2 = ["--endpoint", trio.brokers["b2"].url]
    ok(runner.invoke(app, ["topics", "create", "orders", "--queues", "6", *b2]))
    status = ok(runner.invoke(app, ["cluster", "status", "--topic", "orders", *b2])).stdout.splitlines()
    assert (
        status[0].startswith("cluster mode on zk://") and "asked b2, ZooKeeper session connected" in status[0]
    )
    assert [line.split()[:2] for line in status[2:5]] == [["b1", "True"], ["b2", "True"], ["b3", "True"]]
    assert [line.split()[1] for line in status[-6:]] == ["b1", "b2", "b3", "b1", "b2", "b3"]

    keyed = json.loads(
        ok(runner.invoke(app, ["produce", "orders", "paid", "--sharding-key", "customer-7", *b2])).stdout
    )
    queue = sharding_queue("customer-7", 6)
    assert (keyed["queue_id"], keyed["broker"]) == (queue, ["b1", "b2", "b3"][queue % 3])
    lines = "".join(f"line-{i}\n" for i in range(12))
    batch = json.loads(ok(runner.invoke(app, ["produce", "orders", *b2], input=lines)).stdout)
    assert len(batch["results"]) == 12
    ndjson = "".join(json.dumps({"body": f"q{q}", "queue_id": q}) + "\n" for q in range(6))
    assert (
        len(
            json.loads(ok(runner.invoke(app, ["produce", "orders", "--ndjson", *b2], input=ndjson)).stdout)[
                "results"
            ]
        )
        == 6
    )

    described = ok(runner.invoke(app, ["topics", "describe", "orders", *b2])).stdout.splitlines()
    assert described[0].split() == ["QUEUE_ID", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES", "BROKER", "ALIVE"]
    assert sum(int(line.split()[3]) for line in described[1:]) == 19
    assert [line.split()[4] for line in described[1:]] == ["b1", "b2", "b3", "b1", "b2", "b3"]

    printed = json_lines(runner.invoke(app, ["consume", "orders", "--group", "billing", "--commit", *b2]))
    assert sorted(m["body"] for m in printed) == sorted(
        ["paid", *(f"line-{i}" for i in range(12)), *(f"q{q}" for q in range(6))]
    )
    for q, owner in enumerate(["b1", "b2", "b3", "b1", "b2", "b3"]):
        offsets = httpx.get(
            f"{trio.brokers[owner].url}/groups/billing/offsets", params={"topic": "orders"}
        ).json()
        assert offsets["offsets"][str(q)] == sum(1 for m in printed if m["queue_id"] == q), (
            "committed at the owner"
        )
    assert json_lines(runner.invoke(app, ["consume", "orders", "--group", "billing", *b2])) == []
    formatted = ok(runner.invoke(app, ["consume", "orders", "--queue", "5", "--format", "%q %b %s\\n", *b2]))
    on_five = sorted((m for m in printed if m["queue_id"] == 5), key=lambda m: m["queue_offset"])
    assert formatted.stdout.splitlines() == [f"5 b3 {m['body']}" for m in on_five]
    by_position = json.loads(ok(runner.invoke(app, ["msg", "get", "--topic", "orders", "--queue", str(queue),
                                                    "--offset", "0", "-o", "json", *b2])).stdout)  # fmt: skip
    assert by_position["body"] == "paid"
