"""The client while brokers fail: real ``sparkmq serve --cluster`` processes, ``kill -9``,
``SIGSTOP``. Marked ``cluster`` (``make test-fast`` skips them)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkmq.cli import app
from sparkmq.client import Client, ClientConfig, QueueUnavailable, ReceivedMessage, RetryPolicy
from store import sharding_queue
from tests.client.conftest import read_until
from tests.support.cluster import ProcessCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

OWNERS = ["b1", "b2", "b3", "b1", "b2", "b3"]


def _key_on(broker: str) -> str:
    return next(k for k in (f"customer-{i}" for i in range(1000)) if OWNERS[sharding_queue(k, 6)] == broker)


def test_a_killed_broker_is_routed_around_then_rejoins(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, ["b1", "b2", "b3"]) as cluster:
        patient = ClientConfig(retry=RetryPolicy(deadline_ms=30_000), route_ttl_ms=500)
        with Client(cluster.brokers["b1"].url, config=patient) as client:
            client.create_topic("orders", 6)
            before = client.send_batch("orders", [{"body": f"early-{q}", "queue_id": q} for q in range(6)])
            assert [r.broker for r in before] == OWNERS
            consumer = client.consumer("orders", group="billing", start="earliest")
            early: list[ReceivedMessage] = []
            while len(early) < 6:
                early += consumer.poll(wait_ms=500)
            consumer.commit()

            cluster.brokers["b2"].kill()
            spread = [client.send("orders", f"free-{i}") for i in range(12)]
            assert {r.broker for r in spread} <= {"b1", "b3"}, "unkeyed messages go to the live brokers"
            with pytest.raises(QueueUnavailable) as refused:
                client.send("orders", "keyed", sharding_key=_key_on("b2"))
            assert refused.value.broker == "b2" and refused.value.retriable
            kept = client.send("orders", "keyed", sharding_key=_key_on("b3"))
            assert kept.queue_id == sharding_queue(_key_on("b3"), 6)

            flowing = read_until(
                consumer, lambda texts: len(texts) == 13, 30, "the live queues while b2 is down"
            )
            assert sorted(flowing) == sorted(["keyed"] + [f"free-{i}" for i in range(12)])
            assert set(consumer.unavailable.values()) == {"b2"}
            # the last poll may leave a live queue's long poll in flight: poll until it is back
            wait_until(
                lambda: not consumer.poll(wait_ms=100) and consumer.caught_up,
                10,
                "a dead owner's queues not to hold the consumer up",
            )
            consumer.commit()  # b1's and b3's parts only: b2 moved nothing
            printed = CliRunner().invoke(app, ["consume", "orders", "--endpoint", cluster.brokers["b3"].url])
            assert printed.exit_code == 4, printed.output  # what it could read, then the queues it could not
            assert "queues not read (their broker is down): 1 (b2), 4 (b2)" in printed.output
            assert printed.stdout.count('"body"') == len(early) - 2 + 13

            cluster.restart("b2")
            cluster.wait_live(3)
            after = client.send("orders", "back", sharding_key=_key_on("b2"))
            assert after.broker == "b2"
            tail = read_until(consumer, lambda texts: "back" in texts, 30, "b2's queues flowing again")
            assert tail == ["back"], "nothing b2 acknowledged was lost or read twice"
            wait_until(
                lambda: consumer.poll(wait_ms=100) == [] and consumer.unavailable == {},
                30,
                "every queue of b2 pulled again",
            )
            consumer.commit()
            consumer.close()
            assert client.committed_offsets("billing", "orders")[after.queue_id] == after.queue_offset + 1


def test_a_retry_after_a_lost_answer_stores_the_message_once(tmp_path: Path) -> None:
    # a long session: the paused broker stays a member while its answers are late
    args = ("--operators", "off", "--session-timeout-ms", "20000")
    with ProcessCluster.started(tmp_path, ["b1", "b2", "b3"], args=args) as cluster:
        impatient = ClientConfig(
            request_timeout_ms=400, retry=RetryPolicy(deadline_ms=30_000, backoff_ms=100, max_backoff_ms=300)
        )
        with Client(cluster.brokers["b1"].url, config=impatient) as client:
            client.create_topic("payments", 6)
            owners = [q.broker for q in client.route("payments").queues]
            assert owners == OWNERS, f"placed on the brokers b1 saw live: {owners} ({cluster.describe('b1')})"
            key = _key_on("b3")
            paused = cluster.brokers["b3"]
            paused.pause()
            resumer = threading.Timer(2.0, paused.resume)
            resumer.start()
            try:
                started = time.monotonic()
                stored = client.send("payments", "pay 42", sharding_key=key)
            finally:
                resumer.join()
            assert time.monotonic() - started >= 1.0, "the first attempts timed out while b3 was stopped"
            assert stored.broker == "b3", (stored, [q.broker for q in client.route("payments").queues])
        # read back with the default patience: the 400 ms above is for the send under test, and
        # the broker just resumed from SIGSTOP has its backlog to serve first
        with Client(cluster.brokers["b1"].url) as reader:
            bodies = [m.text for m in reader.pull("payments", stored.queue_id, 0, max_messages=100).messages]
            assert bodies == ["pay 42"], "the attempts shared one Idempotency-Key: stored once"
