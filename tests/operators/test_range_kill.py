"""Range relocation under kill -9: a level bucket is one range request (SCHEDULE_TOPIC_XXXX queue,
first offset, count) that the broker publishes in several atomic chunks; the broker killed after
the range's first chunk, and the operator driver killed while the broker publishes the range,
still deliver every message exactly once. Real ``sparkmq serve``, its Spark job, HTTP producers."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, pid_alive, start_broker
from tests.operators.test_delay_e2e import all_messages_offline, delivered_once
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

MESSAGES = 12
CHUNK_ROWS = 4

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay"


def produce_one_bucket(broker: Broker, topic: str) -> list[dict[str, Any]]:
    """``MESSAGES`` level-1 messages in one request: one store time, one bucket, one range."""
    with broker.http as http:
        response = http.post(
            f"/topics/{topic}/messages:batch",
            json={"messages": [{"body": f"r{i}", "delay_level": 1, "queue_id": 0} for i in range(MESSAGES)]},
        )
        assert response.status_code == 201, response.text
        results: list[dict[str, Any]] = response.json()["results"]
        return results


def test_broker_kill9_after_the_first_chunk_of_a_range_resumes_it(tmp_path: Path) -> None:
    marker = tmp_path / "chunk.killed"
    env = {
        "SPARKMQ_TEST_RELOCATION_FAULT": f"chunk-0:{marker}",
        "SPARKMQ_TEST_RELOCATION_CHUNK_ROWS": str(CHUNK_ROWS),
    }
    first = start_broker(tmp_path, queries=RESOLVERS, env=env)
    parked = produce_one_bucket(first, "resume")
    assert first.process.wait(JOB_START_TIMEOUT_S) == -signal.SIGKILL, "the broker did not crash mid-publish"
    # The decision left behind is one range of the 12 parked offsets, cut by the crash.
    (decision,) = (first.store_dir / "operators" / "delay").glob("*.arrow")
    with pa.memory_map(str(decision)) as source:
        table = pa.ipc.open_file(source).read_all()
    ranges = [r for r in table.to_pylist() if r["queue_id"] >= 0]
    assert ranges == [dict(ranges[0], queue_id=0, queue_offset=0, count=MESSAGES)]
    assert Counter(all_messages_offline(first)) == Counter(r["uniq_key"] for r in parked[:CHUNK_ROWS])
    second = start_broker(tmp_path, queries=RESOLVERS, port=int(first.url.rsplit(":", 1)[1]))
    try:
        delivered_once(second, "resume", parked)
    finally:
        second.stop(signal.SIGKILL)


def test_driver_kill9_while_the_broker_publishes_a_range(tmp_path: Path) -> None:
    marker = tmp_path / "mid_post.killed"
    env = {
        "SPARKMQ_TEST_OPERATOR_FAULT": f"mid_post:{marker}",
        "SPARKMQ_TEST_RELOCATION_FAULT": "sleep-chunk:400",  # 3 chunks: the POST takes > 1 s
        "SPARKMQ_TEST_RELOCATION_CHUNK_ROWS": str(CHUNK_ROWS),
    }
    running = start_broker(tmp_path, queries=RESOLVERS, env=env)
    try:
        job = wait_until(lambda: running.operators()["job"].get("pid"), 60, "the operator job")
        parked = produce_one_bucket(running, "midrange")
        delivered_once(running, "midrange", parked)
        assert marker.exists(), "the driver was not killed"
        wait_until(lambda: not pid_alive(job), 60, "the killed driver to be gone")
        wait_until(lambda: running.operators()["job"]["restarts"] >= 1, 120, "the job to be restarted")
        # The restarted job replays the batch: the broker answers it published, nothing more.
        wait_until(
            lambda: running.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the query"
        )
        delivered_once(running, "midrange", parked)
    finally:
        running.stop(signal.SIGKILL)
