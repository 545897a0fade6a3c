"""The ``sparkmq`` client commands against a real broker (uvicorn on 127.0.0.1), and the
offline ``store`` tools on a real store directory."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from typer.testing import CliRunner, Result

from sparkmq.cli import app

from .conftest import BrokerFactory, RunningBroker

runner = CliRunner()


def cli(broker: RunningBroker, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, [*args, "--url", broker.url], input=input)


def ok_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def lines_json(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_topics_describe_delete_and_exit_codes(shared_broker: RunningBroker, topic: str) -> None:
    ok_json(cli(shared_broker, "topics", "create", topic, "--queues", "2"))
    cli(shared_broker, "produce", topic, "one", "--queue", "1")
    described = cli(shared_broker, "topics", "describe", topic)
    assert described.exit_code == 0
    assert [line.split() for line in described.stdout.splitlines()] == [
        ["QUEUE_ID", "MIN_OFFSET", "MAX_OFFSET", "MESSAGES"], ["0", "0", "0", "0"], ["1", "0", "1", "1"],
    ]  # fmt: skip
    assert ok_json(cli(shared_broker, "topics", "describe", topic, "-o", "json"))["queues"] == 2
    refused = cli(shared_broker, "topics", "delete", topic)
    assert refused.exit_code == 2 and "--yes" in refused.output
    assert cli(shared_broker, "topics", "delete", topic, "--yes").exit_code == 0
    assert cli(shared_broker, "topics", "describe", topic).exit_code == 3
    unreachable = runner.invoke(app, ["topics", "list", "--url", "http://127.0.0.1:9"])
    assert unreachable.exit_code == 4


def test_rich_produce_and_consume_all_queues(
    shared_broker: RunningBroker, topic: str, tmp_path: Path
) -> None:
    ok_json(cli(shared_broker, "topics", "create", topic, "--queues", "3"))
    one = ok_json(cli(shared_broker, "produce", topic, "p0", "--queue", "2", "--tags", "T", "--key", "k1",
                      "--key", "k2", "--property", "origin=cli", "--property", "n=1"))  # fmt: skip
    assert one["queue_id"] == 2
    sharded = ok_json(cli(shared_broker, "produce", topic, "s0", "--sharding-key", "customer-7"))
    again = ok_json(cli(shared_broker, "produce", topic, "s1", "--sharding-key", "customer-7"))
    assert sharded["queue_id"] == again["queue_id"]
    ndjson = '{"body": "n0", "queue_id": 0}\n{"body": "n1", "queue_id": 1, "keys": ["nk"]}\n'
    assert len(ok_json(cli(shared_broker, "produce", topic, "--ndjson", input=ndjson))["results"]) == 2
    batch = pa.RecordBatch.from_pydict({"body": [b"a0", b"a1"], "queue_id": pa.array([0, 0], pa.int32())})
    arrow_file = tmp_path / "batch.arrows"
    with pa.OSFile(str(arrow_file), "wb") as sink, pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    assert len(ok_json(cli(shared_broker, "produce", topic, "--arrow", str(arrow_file)))["results"]) == 2

    everything = lines_json(cli(shared_broker, "consume", topic))
    assert sorted(m["body"] for m in everything) == ["a0", "a1", "n0", "n1", "p0", "s0", "s1"]
    p0 = next(m for m in everything if m["body"] == "p0")
    assert (
        p0["properties"] == {"origin": "cli", "n": "1"} and p0["keys"] == ["k1", "k2"] and p0["tags"] == "T"
    )
    formatted = cli(shared_broker, "consume", topic, "--queue", "2", "--format", "%q:%o:%g:%k:%s\\n")
    assert formatted.stdout.splitlines()[0] == "2:0:T:k1 k2:p0"
    last = lines_json(cli(shared_broker, "consume", topic, "--queue", "0", "--from", "-1"))
    assert [m["body"] for m in last] == ["a1"]
    future = lines_json(cli(shared_broker, "consume", topic, "--from", str(int(time.time() * 1000) + 60_000)))
    assert future == []
    table = cli(shared_broker, "consume", topic, "--queue", "2", "-o", "table")
    assert table.stdout.splitlines()[0] == "2\t0\tT\tk1 k2\tp0"


def test_consume_with_group_commit_and_follow(shared_broker: RunningBroker, topic: str) -> None:
    ok_json(cli(shared_broker, "topics", "create", topic, "--queues", "2"))
    cli(shared_broker, "produce", topic, input="a\nb\nc\nd\n")
    first = lines_json(
        cli(shared_broker, "consume", topic, "--group", "g1", "--commit", "--max-messages", "3")
    )
    assert len(first) == 3
    rest = lines_json(cli(shared_broker, "consume", topic, "--group", "g1", "--commit"))
    assert sorted(m["body"] for m in first + rest) == ["a", "b", "c", "d"]
    assert lines_json(cli(shared_broker, "consume", topic, "--group", "g1")) == []
    refused = cli(shared_broker, "consume", topic, "--commit")
    assert refused.exit_code == 2

    start = ok_json(cli(shared_broker, "topics", "describe", topic, "-o", "json"))["queue_offsets"][0][
        "max_offset"
    ]
    produced: list[int] = []

    def produce_later() -> None:
        with shared_broker.client() as http:
            for body in ("f1", "f2"):
                answer = http.post(f"/topics/{topic}/messages", json={"body": body, "queue_id": 0})
                produced.append(answer.status_code)

    producer = threading.Thread(target=produce_later)
    producer.start()
    followed = cli(shared_broker, "consume", topic, "--queue", "0", "--offset", str(start), "--follow",
                   "--max-messages", "2", "--wait-ms", "200")  # fmt: skip
    producer.join(timeout=30)
    assert produced == [201, 201]
    assert [m["body"] for m in lines_json(followed)] == ["f1", "f2"]


def test_msg_get_find_and_offsets_at(shared_broker: RunningBroker, topic: str) -> None:
    ok_json(cli(shared_broker, "topics", "create", topic, "--queues", "1"))
    before = int(time.time() * 1000) - 1
    stored = ok_json(cli(shared_broker, "produce", topic, "hello", "--key", "order-9"))
    by_id = ok_json(cli(shared_broker, "msg", "get", stored["msg_id"], "-o", "json"))
    by_uniq = ok_json(cli(shared_broker, "msg", "get", stored["uniq_key"], "--topic", topic, "-o", "json"))
    by_position = ok_json(cli(shared_broker, "msg", "get", "--topic", topic, "--queue", "0", "--offset", "0",
                              "-o", "json"))  # fmt: skip
    assert by_id["body"] == by_uniq["body"] == by_position["body"] == "hello"
    table = cli(shared_broker, "msg", "get", stored["msg_id"])
    assert table.exit_code == 0 and "hello" in table.stdout.splitlines()[1]
    found = ok_json(
        cli(shared_broker, "msg", "find", topic, "--key", "order-9", "--since", "-1h", "-o", "json")
    )
    assert [m["body"] for m in found["messages"]] == ["hello"]
    assert cli(shared_broker, "msg", "find", topic, "--key", "nope").exit_code == 3
    assert cli(shared_broker, "msg", "get", "--topic", topic, "--queue", "0", "--offset", "5").exit_code == 3
    at = ok_json(cli(shared_broker, "offsets", topic, "--at", str(before), "-o", "json"))
    assert [row["offset"] for row in at["offsets"]] == [0]
    later = cli(shared_broker, "offsets", topic, "--at", "2100-01-01T00:00:00")
    assert later.stdout.splitlines()[1].split()[-1] == "1"
    assert cli(shared_broker, "offsets", topic, "--at", "yesterday").exit_code == 2


def test_groups_list_describe_and_reset_dry_run_by_default(shared_broker: RunningBroker, topic: str) -> None:
    ok_json(cli(shared_broker, "topics", "create", topic, "--queues", "2"))
    cli(shared_broker, "produce", topic, input="".join(f"m{i}\n" for i in range(6)))
    group = f"{topic}_g"
    lines_json(cli(shared_broker, "consume", topic, "--group", group, "--commit", "--max-messages", "2"))
    listed = cli(shared_broker, "groups", "list")
    assert any(line.split()[:1] == [group] for line in listed.stdout.splitlines())
    described = ok_json(cli(shared_broker, "groups", "describe", group, "-o", "json"))
    assert described["total_lag"] == 4 and described["kind"] == "offset table"
    assert all(q["lag_seconds"] is not None for q in described["queues"] if q["lag"])
    assert "LAG_SECONDS" in cli(shared_broker, "groups", "describe", group).stdout

    def committed() -> dict[str, int]:
        offsets: dict[str, int] = ok_json(cli(shared_broker, "groups", "describe", group, "-o", "json"))[
            "queues"
        ]
        return {str(q["queue_id"]): q["committed_offset"] for q in offsets}  # type: ignore[index]

    before = committed()
    dry = ok_json(
        cli(shared_broker, "groups", "reset", group, "--topic", topic, "--to", "earliest", "-o", "json")
    )
    assert dry["dry_run"] is True and all(q["target"] == 0 for q in dry["queues"])
    assert committed() == before, "a reset without --execute commits nothing"
    table = cli(shared_broker, "groups", "reset", group, "--topic", topic, "--to", "latest")
    assert table.stdout.startswith("dry run") and "CHANGE" in table.stdout
    reset = ["groups", "reset", group, "--topic", topic, "-o", "json"]
    done = ok_json(cli(shared_broker, *reset, "--to", "latest", "--execute"))
    assert done["dry_run"] is False and committed() == {"0": 3, "1": 3}
    shifted = ok_json(cli(shared_broker, *reset, "--shift-by", "-2", "--queue", "0", "--execute"))
    assert shifted["offsets"] == {"0": 1} and committed() == {"0": 1, "1": 3}
    by_time = ok_json(
        cli(shared_broker, "groups", "reset", group, "--topic", topic, "--to", "-1d", "-o", "json")
    )
    assert by_time["offsets"] == {"0": 0, "1": 0}
    assert cli(shared_broker, "groups", "reset", group, "--topic", topic).exit_code == 2
    assert cli(shared_broker, "groups", "describe", "no_such_group_x").exit_code == 3


def test_status_and_health(shared_broker: RunningBroker, topic: str) -> None:
    before = ok_json(cli(shared_broker, "status", "-o", "json"))
    ok_json(cli(shared_broker, "produce", topic, "counted"))
    stats = ok_json(cli(shared_broker, "status", "-o", "json"))
    assert stats["topics"] == before["topics"] + 1
    assert stats["messages_in"]["http"] == before["messages_in"].get("http", 0) + 1
    assert stats["messages_put"] == before["messages_put"] + 1
    assert "commitlog_max_offset" in cli(shared_broker, "status").stdout
    assert cli(shared_broker, "health").stdout.strip() == "healthy"
    assert ok_json(cli(shared_broker, "health", "-o", "json"))["healthy"] is True
    assert runner.invoke(app, ["health", "--url", "http://127.0.0.1:9"]).exit_code == 4


def test_offline_store_tools_refuse_a_store_in_use(broker_factory: BrokerFactory) -> None:
    running = broker_factory()
    with running.client() as http:
        http.post("/topics/offline/messages:batch", json={"messages": [{"body": f"x{i}"} for i in range(5)]})
    store_dir = str(running.store_dir)
    busy = runner.invoke(app, ["store", "inspect", store_dir])
    assert busy.exit_code == 6 and "in use" in busy.output
    running.stop()
    inspected = runner.invoke(app, ["store", "inspect", store_dir, "-o", "json"])
    assert inspected.exit_code == 0, inspected.output
    report = json.loads(inspected.stdout)
    assert sum(q["max_offset"] for q in report["queues"] if q["topic"] == "offline") == 5
    verified = runner.invoke(app, ["store", "verify", store_dir, "-o", "json"])
    assert json.loads(verified.stdout)["ok"] is True and json.loads(verified.stdout)["records"] == 5
    rebuilt = runner.invoke(app, ["store", "rebuild-index", store_dir, "-o", "json"])
    assert rebuilt.exit_code == 0 and json.loads(rebuilt.stdout)["records"] == 5
    assert runner.invoke(app, ["store", "inspect", str(Path(store_dir) / "nope")]).exit_code == 3


def test_store_verify_reports_damage(broker_factory: BrokerFactory) -> None:
    running = broker_factory()
    with running.client() as http:
        http.post(
            "/topics/damaged/messages:batch", json={"messages": [{"body": "y" * 100} for _ in range(4)]}
        )
    running.stop()
    commitlog = sorted((running.store_dir / "commitlog").iterdir())[0]
    with open(commitlog, "r+b") as raw:  # flip body bytes of the third record
        records = raw.read(4096)
        third = records.find(b"y" * 100, records.find(b"y" * 100, records.find(b"y" * 100) + 100) + 100)
        raw.seek(third)
        raw.write(b"z" * 10)
    damaged = runner.invoke(app, ["store", "verify", str(running.store_dir)])
    assert damaged.exit_code == 7 and "damaged" in damaged.stdout


def test_transactions_sendback_and_dlq_commands(shared_broker: RunningBroker, topic: str) -> None:
    import httpx

    with httpx.Client(base_url=shared_broker.url) as http:
        half = http.post(
            f"/topics/{topic}/messages", json={"body": "tx", "transaction": {"producer_group": "cli_pg"}}
        ).json()
        plain = http.post(f"/topics/{topic}/messages", json={"body": "retry me"}).json()
        http.put("/groups/cli_g", json={"max_reconsume_times": 2})
    listed = ok_json(cli(shared_broker, "tx", "list", "--producer-group", "cli_pg", "--output", "json"))
    assert [t["transaction_id"] for t in listed["transactions"]] == [half["transaction_id"]]
    table = cli(shared_broker, "tx", "list", "--producer-group", "cli_pg")
    assert table.exit_code == 0 and half["transaction_id"] in table.output and "prepared" in table.output
    committed = ok_json(
        cli(
            shared_broker,
            "tx",
            "commit",
            half["transaction_id"],
            "--producer-group",
            "cli_pg",
            "--output",
            "json",
        )
    )
    assert committed["state"] == "committed" and committed["ended_now"] is True
    wrong = cli(shared_broker, "tx", "rollback", half["transaction_id"], "--producer-group", "other")
    assert wrong.exit_code != 0
    unknown = cli(shared_broker, "tx", "commit", "NOPE", "--producer-group", "cli_pg")
    assert unknown.exit_code != 0
    sent = ok_json(
        cli(shared_broker, "groups", "sendback", "cli_g", topic, plain["msg_id"], "--output", "json")
    )
    assert (sent["outcome"], sent["attempt"], sent["target_topic"]) == ("retry", 0, "%RETRY%cli_g")
    dead = ok_json(
        cli(
            shared_broker,
            "groups",
            "sendback",
            "cli_g",
            topic,
            plain["uniq_key"],
            "--delay-level",
            "-1",
            "--output",
            "json",
        )
    )
    assert dead["outcome"] == "dlq"
    assert ok_json(cli(shared_broker, "dlq", "list", "cli_g", "--output", "json"))["topic"] == "%DLQ%cli_g"
