"""Clients given a replica group's master, or a bootstrap list whose first address is dead, ride
through a master ``kill -9``: real ``sparkmq serve`` processes, a real ZooKeeper. Marked
``cluster`` (``make test-fast`` skips them)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkmq.cli import app
from sparkmq.client import BrokerUnreachable, Client, ClientConfig, ClientError, RetryPolicy
from tests.support.cluster import ProcessCluster
from tests.support.replica_pair import ReplicaPair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

PATIENT = ClientConfig(retry=RetryPolicy(deadline_ms=30_000, max_backoff_ms=500))


class Workload:
    """A producer thread (one message per send, each a unique value) and a consumer thread of
    group ``billing`` that commits after every poll; what was acknowledged, what failed, what
    was read (in order, duplicates kept)."""

    def __init__(self, client: Client, topic: str) -> None:
        self.client = client
        self.topic = topic
        self.acked: list[str] = []
        self.failed: dict[str, str] = {}
        self.read: list[str] = []
        self.stop_sending = threading.Event()
        self.stop_reading = threading.Event()
        self.faults: list[BaseException] = []
        self._threads = [threading.Thread(target=self._guard, args=(f,)) for f in (self._send, self._consume)]

    def _guard(self, run: object) -> None:
        try:
            run()  # type: ignore[operator]
        except BaseException as exc:
            self.faults.append(exc)

    def _send(self) -> None:
        i = 0
        while not self.stop_sending.is_set():
            value = f"m-{i}"
            i += 1
            try:
                self.client.send(self.topic, value)
            except ClientError as exc:
                self.failed[value] = str(exc)
                continue
            self.acked.append(value)

    def _consume(self) -> None:
        with self.client.consumer(self.topic, group="billing", start="earliest") as consumer:
            while not self.stop_reading.is_set():
                self.read += [m.text or "" for m in consumer.poll(wait_ms=200)]
                try:
                    consumer.commit()
                except ClientError as exc:
                    if not exc.retriable:
                        raise

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def finish(self, timeout_s: float = 90) -> None:
        """Stop sending, read until every acknowledged value has been read, stop."""
        self.stop_sending.set()
        self._threads[0].join(60)
        try:
            wait_until(
                lambda: bool(self.faults) or set(self.acked) <= set(self.read), timeout_s, "every ack read"
            )
        finally:
            self.stop_reading.set()
            self._threads[1].join(60)

    def check(self) -> None:
        """Every acknowledged value read exactly once, nothing read twice or never sent."""
        assert self.faults == []
        assert self.failed == {}, f"sends failed through the failover: {list(self.failed.items())[:3]}"
        counts = Counter(self.read)
        lost = [v for v in self.acked if counts[v] == 0]
        twice = [v for v, n in counts.items() if n > 1]
        assert lost == [] and twice == [], f"lost {lost[:5]}, read twice {twice[:5]}"
        assert set(counts) <= set(self.acked) | set(self.failed)


def test_a_client_given_only_the_masters_address_rides_through_its_kill(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1")
        with Client(pair.master.url, config=PATIENT) as client:
            client.create_topic("orders", 4)
            assert client.route("orders").queues[0].replicas == (pair.master.url, pair.slave.url)
            work = Workload(client, "orders")
            work.start()
            wait_until(lambda: len(work.acked) >= 50 or bool(work.faults), 60, "50 acks before the kill")
            pair.master.kill()
            killed_at = len(work.acked)
            wait_until(lambda: len(work.acked) >= killed_at + 100 or bool(work.faults), 90, "100 acks after")
            work.finish()
            work.check()
            pair.wait_led_by(pair.slave)
            owners = {r.broker for r in client.queue_offsets("orders")}
            assert owners == {"b1"} and client.route("orders").queues[0].http == pair.slave.url
            committed = client.committed_offsets("billing", "orders")
            assert sum(committed.values()) == len(work.read), "the last commit reached the new master"


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.output


def test_the_cli_takes_a_bootstrap_list_and_skips_a_dead_first_address(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1")
        both = f"{pair.master.url},{pair.slave.url}"
        code, out = _cli("topics", "create", "t", "--queues", "2", "--url", both)
        assert code == 0, out
        sent = []
        for i in range(5):
            code, out = _cli("produce", "t", f"before-{i}", "--url", both)
            assert code == 0, out
            sent.append(f"before-{i}")
        pair.master.kill()
        env = {"SPARKMQ_URL": both}  # the dead master first
        wait_until(lambda: _cli("produce", "t", "after-0", env=env)[0] == 0, 60, "a produce after the kill")
        sent.append("after-0")
        for i in range(1, 5):
            code, out = _cli("produce", "t", f"after-{i}", env=env)
            assert code == 0, out
            sent.append(f"after-{i}")
        code, out = _cli("consume", "t", "--from", "earliest", "--output", "json", env=env)
        assert code == 0, out
        bodies = [json.loads(line)["body"] for line in out.splitlines() if line.startswith("{")]
        assert sorted(bodies) == sorted(sent), "every acknowledged message, once"
        code, out = _cli("status", env=env)
        assert code == 0, out  # the first bootstrap address that answers
        dead = pair.master.url
        code, out = _cli("topics", "list", "--url", f"{dead},http://127.0.0.1:9")
        assert code == 4, out
        assert f"tried {dead}, http://127.0.0.1:9" in out, "the error names every address tried"


def test_the_client_names_every_address_it_tried() -> None:
    with (
        Client(["http://127.0.0.1:9", "http://127.0.0.1:7"], config=PATIENT) as client,
        pytest.raises(BrokerUnreachable) as failed,
    ):
        client.topics()
    assert "tried http://127.0.0.1:9, http://127.0.0.1:7" in str(failed.value)
    assert not failed.value.maybe_sent
