"""The delay wheel under kill -9 (a real ``sparkmq serve``, HTTP producers): timer messages
decided a window ahead, the broker killed after the "due at T" records are written and before its
wheel appends, then after the wheel appends and before it records its progress; and with its
Spark job, the operator driver killed after posting a batch of decisions. Each message checked
one by one: delivered exactly once, never before its due time."""

from __future__ import annotations

import contextlib
import io
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from store import StoreReader
from store.publish import WHEEL_TOPIC
from store.publish.relocations import RELOCATION_SCHEMA
from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, pid_alive, start_broker
from tests.operators.test_delay_e2e import delivered_once
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: Wide enough that a micro-batch on a loaded 2-core machine (20 s here at load 15) still decides
#: ahead of time.
LOOKAHEAD = ("--wheel-lookahead", "40s")
MESSAGES = 12


def produce_timers(broker: Broker, topic: str, delay_ms: int) -> list[dict[str, Any]]:
    """``MESSAGES`` timer messages ``delay_ms`` ahead, ~1.1 s apart in all: two or three seconds,
    so two or three "due at T" records."""
    entries = [{"body": f"w{i}", "delay_ms": delay_ms + 97 * i} for i in range(MESSAGES)]
    with broker.http as http:
        response = http.post(f"/topics/{topic}/messages:batch", json={"messages": entries})
        assert response.status_code == 201, response.text
        results: list[dict[str, Any]] = response.json()["results"]
    for entry, result in zip(entries, results, strict=True):
        asked = result["store_timestamp"] + entry["delay_ms"]
        result["due_ms"] = -(-asked // 1000) * 1000  # rounded up to the second (RocketMQ 5)
    return results


def offline(store_dir: Path, topic: str) -> list[tuple[str, int]]:
    """(UNIQ_KEY, store time ms) of every record of ``topic``, read without the store lock."""
    with StoreReader(store_dir) as reader:
        out: list[tuple[str, int]] = []
        for queue_id, (low, high) in reader.queue_offsets(topic).items():
            if high > low:
                batch = reader.read_batch(topic, queue_id, low, high - low).batch
                stamps = batch.column("store_timestamp").cast("int64").to_pylist()
                out.extend(zip(batch.column("uniq_key").to_pylist(), stamps, strict=True))
        return out


def query_active(broker: Broker) -> None:
    """Wait for the delay query's second batch: its first (Python workers starting, planning)
    takes up to a minute on a loaded machine, and a message it reads would be overdue by then."""
    wait_until(
        lambda: (broker.delay_operator().get("last_batch_id") or 0) >= 1, JOB_START_TIMEOUT_S, "the query"
    )


def never_early(delivered: list[tuple[str, int]], parked: list[dict[str, Any]]) -> None:
    due = {r["uniq_key"]: r["due_ms"] for r in parked}
    early = {key: due[key] - at for key, at in delivered if at < due[key]}
    assert early == {}, f"delivered early (ms): {early}"


def post_decisions_ahead(broker: Broker, parked: list[dict[str, Any]]) -> None:
    """What the resolver posts for ``parked`` when it decides them ahead (batch 0): one row each,
    due at its time. The broker is killed while it answers (the fault): no answer expected."""
    table = pa.table(
        {
            "commitlog_offset": [r["commitlog_offset"] for r in parked],
            "kind": [0] * len(parked),
            "enqueue_ms": [r["store_timestamp"] for r in parked],
            "dequeue_ms": [r["due_ms"] for r in parked],
        },
        schema=RELOCATION_SCHEMA,
    )
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with contextlib.suppress(httpx.HTTPError), broker.http as http:
        http.post(
            "/operators/delay/batches/0",
            content=sink.getvalue(),
            headers={"content-type": "application/vnd.apache.arrow.stream"},
        )


def test_broker_kill9_before_and_after_the_wheel_appends(tmp_path: Path) -> None:
    """The broker's side alone (``--operators off``; the batch the resolver would post is posted
    over the same HTTP call), so the timing does not depend on Spark's batches."""
    off = (*LOOKAHEAD, "--operators", "off")
    env = {"SPARKMQ_TEST_RELOCATION_FAULT": f"scheduled:{tmp_path / 'scheduled.killed'}"}
    first = start_broker(tmp_path, env=env, extra_args=off)
    port = int(first.url.rsplit(":", 1)[1])
    try:
        parked = produce_timers(first, "wheeled", 20_000)  # due after the restart below
        post_decisions_ahead(first, parked)
        # 1. Killed right after the batch's "due at T" records are written: nothing delivered.
        assert first.process.wait(60) == -signal.SIGKILL, "the broker did not crash"
    finally:
        first.stop(signal.SIGKILL)
    assert offline(first.store_dir, "wheeled") == []
    assert offline(first.store_dir, WHEEL_TOPIC), "no decision record was written"
    # 2. Restarted: the wheel replays the decisions at T, and the broker is killed after its
    # first append, before it records its progress.
    env = {"SPARKMQ_TEST_RELOCATION_FAULT": f"wheel-published:{tmp_path / 'published.killed'}"}
    second = start_broker(tmp_path, env=env, extra_args=off, port=port)
    try:
        assert second.process.wait(60) == -signal.SIGKILL, "the wheel did not publish"
    finally:
        second.stop(signal.SIGKILL)
    delivered = offline(second.store_dir, "wheeled")
    assert 0 < len(delivered) < MESSAGES and max(Counter(k for k, _ in delivered).values()) == 1
    never_early(delivered, parked)
    # 3. Restarted again: the unmarked decision is checked, found relocated, not appended again;
    # the others go at their time.
    third = start_broker(tmp_path, extra_args=off, port=port)
    try:
        got = delivered_once(third, "wheeled", parked)
        never_early([(m["uniq_key"], m["store_timestamp"]) for m in got], parked)
        wait_until(lambda: third.delay_operator().get("wheel_pending") == 0, 30, "the wheel to settle")
        assert len(all_keys(third, "wheeled")) == MESSAGES
    finally:
        third.stop(signal.SIGKILL)


def all_keys(broker: Broker, topic: str) -> list[str]:
    from tests.operators.broker_process import all_messages

    return [m["uniq_key"] for m in all_messages(broker, topic)]


def test_driver_kill9_after_posting_decisions_ahead(tmp_path: Path) -> None:
    """The driver dies after its batch's decisions are in the wheel: the wheel delivers them at T
    on its own, and the restarted job's replay of the batch is answered "already published"."""
    marker = tmp_path / "after_post.killed"
    running = start_broker(
        tmp_path, env={"SPARKMQ_TEST_OPERATOR_FAULT": f"after_post:{marker}"}, extra_args=LOOKAHEAD
    )
    try:
        job = wait_until(lambda: running.operators()["job"].get("pid"), 60, "the operator job")
        wait_until(
            lambda: running.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the query"
        )
        parked = produce_timers(running, "replayed", 60_000)
        wait_until(marker.exists, JOB_START_TIMEOUT_S, "the driver to be killed after its POST")
        assert running.delay_operator().get("wheel_pending"), "the batch posted no decision ahead"
        wait_until(lambda: not pid_alive(job), 60, "the killed driver to be gone")
        got = delivered_once(running, "replayed", parked)
        never_early([(m["uniq_key"], m["store_timestamp"]) for m in got], parked)
        wait_until(lambda: running.operators()["job"]["restarts"] >= 1, 120, "the job to be restarted")
        wait_until(
            lambda: running.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the query"
        )
        replayed = running.delay_operator().get("last_batch_id") or 0
        wait_until(
            lambda: (running.delay_operator().get("last_batch_id") or 0) >= replayed + 2,
            JOB_START_TIMEOUT_S,
            "a few batches of the restarted job (its replay included)",
        )
        assert Counter(all_keys(running, "replayed")) == Counter(r["uniq_key"] for r in parked)
    finally:
        running.stop(signal.SIGKILL)
