"""Delayed delivery end to end: a real ``sparkmq serve``, its operator job (real local Spark,
transformWithState on RocksDB) and real HTTP producers; kill -9 of the driver and the broker."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.operator_job import LOCK_FILE
from broker.operators import lock_holder
from tests.operators.broker_process import (
    JOB_START_TIMEOUT_S,
    Broker,
    all_messages,
    children_of,
    pid_alive,
    start_broker,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: The default level table's first levels (1s 5s 10s).
LEVEL_MS = {1: 1000, 2: 5000, 3: 10_000}

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay"


def produce_delayed(broker: Broker, topic: str, count: int, level: int, tag: str) -> list[dict[str, Any]]:
    with broker.http as http:
        results = []
        for i in range(count):
            resp = http.post(f"/topics/{topic}/messages", json={"body": f"{tag}-{i}", "delay_level": level})
            assert resp.status_code == 201, resp.text
            results.append(resp.json())
        return results


def delivered_once(broker: Broker, topic: str, expected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Wait until every expected message is in ``topic``; assert none twice and none extra."""
    want = {r["uniq_key"] for r in expected}

    def arrived() -> list[dict[str, Any]] | None:
        got = all_messages(broker, topic)
        return got if want <= {m["uniq_key"] for m in got} else None

    got = wait_until(arrived, JOB_START_TIMEOUT_S, f"{len(want)} delayed messages in {topic}", poll_s=0.5)
    counts = Counter(m["uniq_key"] for m in got)
    assert {k: n for k, n in counts.items() if n > 1} == {}, "a delayed message was delivered twice"
    assert set(counts) == want, "unexpected messages in the topic"
    return got


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    running = start_broker(tmp_path, queries=RESOLVERS)
    yield running
    running.stop(signal.SIGKILL)


def test_levels_delivered_exactly_once_never_early_and_reported(broker: Broker) -> None:
    parked = []
    for level, count in ((1, 20), (2, 8), (3, 4)):
        parked += [dict(r, level=level) for r in produce_delayed(broker, "orders", count, level, f"l{level}")]
    assert {r["topic"] for r in parked} == {"SCHEDULE_TOPIC_XXXX"}
    got = delivered_once(broker, "orders", parked)
    by_key = {m["uniq_key"]: m for m in got}
    for r in parked:
        m = by_key[r["uniq_key"]]
        due = r["store_timestamp"] + LEVEL_MS[r["level"]]
        assert m["store_timestamp"] >= due, f"delivered {due - m['store_timestamp']} ms early"
        # RocketMQ keeps DELAY/REAL_* in the delivered bytes (the string is built before clearing).
        assert m["properties"]["DELAY"] == str(r["level"]) and m["properties"]["REAL_TOPIC"] == "orders"
        assert m["body"] == f"l{r['level']}-" + m["body"].split("-", 1)[1]
    report = wait_until(
        lambda: (op := broker.delay_operator()) and op.get("relocated_total") == len(parked) and op,
        60,
        "/operators to count the relocations",
    )
    assert report["state"] == "active" and report["pending"] == 0 and report["next_due_ms"] is None
    # Everything delivered: each level's delayOffset is its queue's end (RocketMQ's meaning).
    expected = {1: 20, 2: 8, 3: 4}  # the levels whose queue holds messages
    try:
        wait_until(lambda: _delay_offsets(broker) == expected, 30, "delayOffset.json at the queue ends")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_delay_offsets(broker)} {broker.delay_operator()}") from None
    report = broker.delay_operator()  # the job's progress report has arrived by now
    assert report["last_batch_id"] is not None and report["input_lag"] == 0
    metrics = httpx.get(f"{broker.url}/metrics").text
    assert f'sparkmq_operator_relocated_total{{operator="delay"}} {len(parked)}' in metrics
    assert f'sparkmq_operator_lateness_seconds_count{{operator="delay"}} {len(parked)}' in metrics
    assert 'sparkmq_operator_up{operator="delay"} 1' in metrics
    job = broker.operators()["job"]
    assert job["mode"] == "child" and job["running"]
    # SIGTERM stops the broker cleanly, and its job with it.
    job_pid = job["pid"]
    assert broker.stop(signal.SIGTERM) == 0
    wait_until(lambda: not pid_alive(job_pid), 30, "the operator job to stop with the broker")


def test_pending_messages_are_reported_with_their_due_time(broker: Broker) -> None:
    wait_until(
        lambda: broker.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the delay query"
    )
    parked = produce_delayed(broker, "later", 3, 5, "p")  # 1 min
    wait_until(lambda: broker.delay_operator().get("pending") == 3, 120, "3 pending delayed messages")
    op = broker.delay_operator()
    due = min(r["store_timestamp"] for r in parked) + 60_000
    bucket_end = -(-due // 100) * 100  # a level range is acted on at the latest due in its 100 ms bucket
    # delayOffset.json (RocketMQ's meaning): level 5's next offset to examine is the first pending.
    wait_until(lambda: _delay_offsets(broker).get(5) == 0, 30, "delayOffset.json to hold level 5 at 0")
    assert due <= op["next_due_ms"] <= bucket_end
    assert op["relocated_total"] == 0
    assert all_messages(broker, "later") == [], "never visible before its due time"


def _delay_offsets(broker: Broker) -> dict[int, int]:
    path = broker.store_dir / "config" / "delayOffset.json"
    if not path.exists():
        return {}
    import json

    return {int(k): int(v) for k, v in json.loads(path.read_text())["offsetTable"].items()}


# ``after_post`` (the driver killed once its POST was answered) is covered with the delay wheel
# holding the killed batch's decisions: test_wheel_kill.test_driver_kill9_after_posting_decisions_ahead.
@pytest.mark.parametrize("point", ["before_post"])
def test_driver_kill9_delivers_exactly_once(tmp_path: Path, point: str) -> None:
    marker = tmp_path / f"{point}.killed"
    running = start_broker(
        tmp_path, queries=RESOLVERS, env={"SPARKMQ_TEST_OPERATOR_FAULT": f"{point}:{marker}"}
    )
    try:
        parked = produce_delayed(running, "kill", 25, 1, point)
        delivered_once(running, "kill", parked)
        assert marker.exists(), "the driver was not killed"
        # After "after_post" the batch is published before the supervisor has noticed the kill.
        wait_until(
            lambda: running.operators()["job"]["restarts"] >= 1, 60, "the supervisor to restart the job"
        )
    finally:
        running.stop(signal.SIGKILL)


@pytest.mark.parametrize("grace", ["0", "default"])
def test_broker_kill9_mid_publish_then_restart_resumes_without_duplicates(tmp_path: Path, grace: str) -> None:
    """``--operator-job-grace 0``: the job dies with the broker and the restarted broker starts a
    new one. The default grace: the job outlives the broker, waiting for it, and the restarted
    broker (the same launch) adopts it. Either way each delayed message is delivered once."""
    marker = tmp_path / "chunk.killed"
    env = {"SPARKMQ_TEST_RELOCATION_FAULT": f"chunk-0:{marker}", "SPARKMQ_TEST_RELOCATION_CHUNK_ROWS": "4"}
    args = ("--operator-job-grace", "0") if grace == "0" else ()
    first = start_broker(tmp_path, queries=RESOLVERS, env=env, extra_args=args)
    parked = produce_delayed(first, "resume", 12, 1, "r")
    parked += produce_delayed(first, "resume", 6, 3, "r3")  # still pending while the broker is down
    job_pid = wait_until(lambda: first.operators()["job"].get("pid"), 30, "the operator job pid")
    job_children = wait_until(lambda: children_of(job_pid), 60, "the job's JVM")
    assert first.process.wait(JOB_START_TIMEOUT_S) == -signal.SIGKILL, "the broker did not crash mid-publish"
    assert marker.exists()
    if grace == "0":  # no orphan: the driver dies with the broker, its JVM with the driver
        wait_until(lambda: not pid_alive(job_pid), 30, "the operator driver to die with the broker")
        wait_until(lambda: not any(pid_alive(p) for p in job_children), 60, "the driver's JVM to exit")
    else:
        time.sleep(3)
        assert pid_alive(job_pid) and all(pid_alive(p) for p in job_children), "the job waits for its broker"
    partial = Counter(all_messages_offline(first))
    assert 0 < sum(partial.values()) < len(parked)
    # the same launch (the fault fired once: its marker exists), so a surviving job is adopted
    port = int(first.url.rsplit(":", 1)[1])
    second = start_broker(tmp_path, queries=RESOLVERS, env=env, extra_args=args, port=port)
    try:
        delivered_once(second, "resume", parked)
        job = second.operators()["job"]
        if grace == "0":
            assert job["adoptions"] == 0 and job["pid"] != job_pid
        else:
            assert (job["adoptions"], job["pid"], job["restarts"]) == (1, job_pid, 0), job
    finally:
        second.stop(signal.SIGKILL)


def test_a_job_whose_broker_stays_down_exits_after_its_grace(tmp_path: Path) -> None:
    running = start_broker(tmp_path, queries=RESOLVERS, extra_args=("--operator-job-grace", "5s"))
    lock = running.checkpoint_dir / "operators" / LOCK_FILE
    job_pid = wait_until(lambda: (lock_holder(lock) or {}).get("pid"), 60, "the job to hold its lock")
    jvm = wait_until(lambda: children_of(job_pid), 60, "the job's JVM")
    wait_until(
        lambda: running.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the delay query"
    )
    running.process.send_signal(signal.SIGKILL)
    running.process.wait()
    time.sleep(2)
    assert pid_alive(job_pid), "the job waits out its grace"
    wait_until(lambda: not pid_alive(job_pid), 60, "the job to give up after its grace")
    # free once the last of its threads has exited (the main one shows as a zombie before that)
    wait_until(lambda: lock_holder(lock) is None, 30, "its lock to be free for the next broker's job")
    wait_until(lambda: not any(pid_alive(p) for p in jvm), 60, "its JVM to exit")
    job_log = (running.checkpoint_dir / "operators" / "operator-job.log").read_text()
    assert "no broker answered for 5 s: the job exits" in job_log


def all_messages_offline(broker: Broker) -> list[str]:
    """UNIQ_KEYs the crashed broker wrote to ``resume``, read without the store lock."""
    from store import StoreReader

    with StoreReader(broker.store_dir) as reader:
        keys: list[str] = []
        for queue_id, (low, high) in reader.queue_offsets("resume").items():
            if high > low:
                batch = reader.read_batch("resume", queue_id, low, high - low).batch
                keys.extend(batch.column("uniq_key").to_pylist())
        return keys


def test_serve_with_operators_off_runs_no_job(tmp_path: Path) -> None:
    running = start_broker(tmp_path, queries=RESOLVERS, extra_args=("--operators", "off"))
    try:
        assert running.operators()["job"] == {"mode": "external"}
        assert httpx.get(f"{running.url}/operators/settings").json()["delay_levels_ms"][:3] == [
            1000,
            5000,
            10000,
        ]
    finally:
        running.stop()
