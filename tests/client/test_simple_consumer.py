"""``client.simple_consumer`` (POP), the push worker and ``sparkmq consume --pop`` against a real
lone broker and a real three-broker cluster (handles name their broker; acks are forwarded)."""

from __future__ import annotations

import json
import threading
import time

import httpx
from typer.testing import CliRunner

from sparkmq.cli import app
from sparkmq.client import Client, PopMessage, PushWorker
from tests.cluster.inprocess import InProcessCluster
from tests.ingest.conftest import RunningBroker
from tests.support.waiting import wait_until

runner = CliRunner()


def _receive_all(
    client: Client, topic: str, group: str, count: int, invisible_ms: int = 60_000
) -> list[PopMessage]:
    consumer = client.simple_consumer(topic, group, invisible_ms=invisible_ms)
    got: list[PopMessage] = []

    def step() -> bool:
        got.extend(consumer.receive(max_messages=32, wait_ms=200))
        return len(got) >= count

    wait_until(step, 30, f"{count} messages received")
    return got


def test_receive_ack_change_on_a_lone_broker(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.send_batch(topic, [{"body": f"m{i}"} for i in range(10)])
        consumer = client.simple_consumer(topic, "g", invisible_ms=60_000)
        got = _receive_all(client, topic, "g", 10)
        assert sorted(m.text or "" for m in got) == sorted(f"m{i}" for i in range(10))
        assert all(m.delivery_attempt == 1 and "~" not in m.receipt_handle for m in got)
        new = consumer.change_invisible(got[0], 90_000)
        outcomes = consumer.ack([new, got[0], *got[1:]])
        assert [o.ok for o in outcomes] == [True, False, *[True] * 9]
        assert outcomes[1].error == "receipt_handle_expired"
        assert consumer.receive(max_messages=32, wait_ms=300) == []


def test_competing_consumers_across_three_brokers(trio: InProcessCluster) -> None:
    b1 = trio.brokers["b1"]
    with Client(b1.url) as client:
        client.create_topic("orders", 6)
        for i in range(60):  # keyed: spread over the six queues of the three brokers
            client.send("orders", f"m{i}", sharding_key=f"k{i}")
        first, second = (client.simple_consumer("orders", "g", invisible_ms=60_000) for _ in range(2))
        seen: list[PopMessage] = []

        def step() -> bool:
            seen.extend(first.receive(max_messages=7, wait_ms=100))
            seen.extend(second.receive(max_messages=7, wait_ms=100))
            return len(seen) >= 60

        wait_until(step, 60, "every message received once")
        assert sorted(m.text or "" for m in seen) == sorted(f"m{i}" for i in range(60))
        assert {m.receipt_handle.split("~")[0] for m in seen} == {"b1", "b2", "b3"}
        # Any broker forwards an ack or a change to the broker a handle names.
        from_b2 = [m for m in seen if m.message.broker == "b2"]
        with httpx.Client(base_url=b1.url, timeout=30) as http:
            changed = http.post(
                "/groups/g/messages:changeInvisible",
                json={"receipt_handle": from_b2[0].receipt_handle, "invisible_ms": 60_000},
            )
            assert changed.status_code == 200, changed.text
            assert changed.json()["receipt_handle"].startswith("b2~")
            stale = http.post(
                "/groups/g/messages:changeInvisible",
                json={"receipt_handle": from_b2[0].receipt_handle, "invisible_ms": 60_000},
            )
            assert (stale.status_code, stale.json()["error"]) == (409, "receipt_handle_expired")
            handles = [changed.json()["receipt_handle"]] + [
                m.receipt_handle for m in seen if m is not from_b2[0]
            ]
            acked = http.post("/groups/g/messages:ack", json={"receipt_handles": handles}).json()
        assert acked["acked"] == 60, [r for r in acked["results"] if not r["ok"]][:3]
        assert first.receive(max_messages=32, wait_ms=300) == []


def test_push_worker_retries_a_failure_and_extends_a_slow_handler(
    lone_broker: RunningBroker, topic: str
) -> None:
    with Client(lone_broker.url) as client:
        client.send_batch(topic, [{"body": b} for b in ("fails-once", "slow", "plain")])
        attempts: dict[str, list[int]] = {}

        def handler(message: PopMessage) -> None:
            text = message.text or ""
            attempts.setdefault(text, []).append(message.delivery_attempt)
            if text == "fails-once" and message.delivery_attempt == 1:
                raise RuntimeError("first attempt fails")
            if text == "slow":
                time.sleep(2.5)  # longer than the invisible time: the keeper extends it

        worker = PushWorker(client.simple_consumer(topic, "push", invisible_ms=1_500), handler, wait_ms=200)
        rival = client.simple_consumer(topic, "push", invisible_ms=1_500)
        stolen: list[PopMessage] = []
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=(stop,))
        thread.start()
        try:
            wait_until(lambda: worker.stats.acked == 3, 30, "the three messages acked")
            stolen = rival.receive(max_messages=32, wait_ms=0)
        finally:
            stop.set()
            thread.join(timeout=30)
        assert attempts["fails-once"] == [1, 2] and attempts["slow"] == [1] and attempts["plain"] == [1]
        assert worker.stats.failed == 1 and worker.stats.extended >= 1 and worker.stats.ack_refused == 0
        assert stolen == []


def test_cli_consume_pop_acks_what_it_printed(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.send_batch(topic, [{"body": f"line {i}"} for i in range(5)])
    args = ["consume", topic, "--pop", "--group", "cli", "--endpoint", lone_broker.url, "--wait-ms", "300"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    bodies = sorted(json.loads(line)["body"] for line in first.stdout.splitlines() if line.startswith("{"))
    assert bodies == [f"line {i}" for i in range(5)]
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and not [line for line in again.stdout.splitlines() if line.startswith("{")]
    refused = runner.invoke(app, ["consume", topic, "--pop", "--endpoint", lone_broker.url])
    assert refused.exit_code == 2 and "--pop needs --group" in refused.output
