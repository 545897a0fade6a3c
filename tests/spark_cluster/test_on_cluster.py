"""The Spark side on a real standalone cluster (1 master, 2 workers, executors in their own JVMs
and Python workers): the ``sparkmq`` source, the exactly-once sink and the operator job
(``sparkmq operators --master spark://...``), and the job carrying on after ``kill -9`` of one
worker in the middle of its batches, with every delayed message delivered exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.operators.broker_process import Broker, all_messages, start_broker
from tests.support.spark_cluster import SparkCluster, cluster_env
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.spark_cluster]

DRIVER_TIMEOUT_S = 600


def produce(broker: Broker, topic: str, count: int, **fields: Any) -> list[dict[str, Any]]:
    with broker.http as http:
        response = http.post(
            f"/topics/{topic}/messages:batch",
            json={"messages": [{"body": f"{topic}-{i}", **fields} for i in range(count)]},
        )
        assert response.status_code == 201, response.text
        results: list[dict[str, Any]] = response.json()["results"]
        return results


def run_driver(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark_cluster.driver", *args],
        capture_output=True, env=cluster_env(), timeout=DRIVER_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-4000:]
    answer: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return answer


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    running = start_broker(tmp_path, extra_args=("--operators", "off"))
    yield running
    running.stop(signal.SIGKILL)


def test_read_stream_on_the_cluster(spark_cluster: SparkCluster, broker: Broker, tmp_path: Path) -> None:
    produced = produce(broker, "cluster-read", 500)
    got = run_driver(
        "read", spark_cluster.master_url, broker.url, "cluster-read", str(tmp_path / "read-ckpt")
    )
    assert sorted(got["uniq_keys"]) == sorted(r["uniq_key"] for r in produced)


def test_exactly_once_sink_on_the_cluster(
    spark_cluster: SparkCluster, broker: Broker, tmp_path: Path
) -> None:
    produce(broker, "cluster-src", 800)
    run_driver(
        "sink",
        spark_cluster.master_url,
        broker.url,
        "cluster-src",
        "cluster-dst",
        str(tmp_path / "sink-ckpt"),
    )
    copied = Counter(m["body"] for m in all_messages(broker, "cluster-dst"))
    assert copied == Counter(f"cluster-src-{i}" for i in range(800))


def test_operator_job_carries_on_after_a_worker_is_killed(
    spark_cluster: SparkCluster, broker: Broker, tmp_path: Path
) -> None:
    log_path = tmp_path / "operators.log"
    command = [
        sys.executable, "-m", "sparkmq.cli", "operators", "--endpoint", broker.url,
        "--master", spark_cluster.master_url, "--checkpoint-dir", str(tmp_path / "checkpoints"),
    ]  # fmt: skip
    with open(log_path, "wb") as out:
        job = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=cluster_env())
    try:
        wait_until(lambda: _active(broker), DRIVER_TIMEOUT_S, "the delay query on the cluster", poll_s=1)
        parked = produce(broker, "cluster-late", 100, delay_level=1)
        wait_until(
            lambda: len(all_messages(broker, "cluster-late")) >= 100, 300, "the first deliveries", poll_s=1
        )
        # Messages due in 5 s, then a worker killed while the job's batches run on both workers.
        parked += produce(broker, "cluster-late", 2000, delay_level=2)
        time.sleep(4.5)
        before = _delay(broker).get("last_batch_id") or 0
        killed = spark_cluster.kill_worker(0)
        parked += produce(broker, "cluster-late", 100, delay_level=1)
        want = {r["uniq_key"] for r in parked}
        what = f"{len(want)} deliveries after worker {killed} died"
        got = wait_until(lambda: _all_of(broker, "cluster-late", want), 600, what, poll_s=2)
        counts = Counter(m["uniq_key"] for m in got)
        assert {k: n for k, n in counts.items() if n > 1} == {}, "a delayed message was delivered twice"
        assert set(counts) == want
        assert job.poll() is None, "the operator job died with the worker"
        assert (_delay(broker).get("last_batch_id") or 0) > before, "no batch ran after the kill"
        assert spark_cluster.alive_workers() == 1
    finally:
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            job.kill()
        spark_cluster.replace_worker(0)


def _all_of(broker: Broker, topic: str, want: set[str]) -> list[dict[str, Any]] | None:
    got = all_messages(broker, topic)
    return got if {m["uniq_key"] for m in got} >= want else None


def _delay(broker: Broker) -> dict[str, Any]:
    return broker.delay_operator()


def _active(broker: Broker) -> bool:
    return bool(_delay(broker).get("state") == "active")
