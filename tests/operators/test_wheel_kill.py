"""The delay wheel under kill -9 (a real ``sparkmq serve``, HTTP producers): timer messages
decided a window ahead, the broker killed after the "due at T" records are written and before its
wheel appends, then after the wheel appends and before it records its progress (one test, three
broker processes, no Spark); and with its Spark job, the operator driver killed after posting a
batch whose decisions the wheel holds (one Spark job, restarted once). Each message checked one
by one: delivered exactly once, never before its due time.

The driver kill is the ``after_post`` point of ``test_delay_e2e``'s driver kill test (which now
covers ``before_post`` only): the same crash point, with the batch's decisions in the wheel."""

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
from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, start_broker
from tests.operators.test_delay_e2e import delivered_once, produce_delayed
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: Wide enough that a micro-batch on a loaded 2-core machine (20 s here at load 15) still decides
#: ahead of time.
LOOKAHEAD = ("--wheel-lookahead", "40s")
#: How far ahead the broker test's timers are due: after the broker's first restart (a few
#: seconds), so the restarted wheel waits for them.
BROKER_DELAY_MS = 12_000
#: How far ahead the driver test's timers are due: after a warm micro-batch has decided them
#: (10-15 s at load 15), so its POST comes before their time.
DRIVER_DELAY_MS = 25_000
MESSAGES = 12

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay"


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
    first = start_broker(tmp_path, queries=RESOLVERS, env=env, extra_args=off)
    port = int(first.url.rsplit(":", 1)[1])
    try:
        parked = produce_timers(first, "wheeled", BROKER_DELAY_MS)  # due after the restart below
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
    # (When the decisions are overdue by then, the wheel may publish, and die, before /healthz.)
    second = start_broker(tmp_path, queries=RESOLVERS, env=env, extra_args=off, port=port, wait_healthy=False)
    try:
        assert second.process.wait(60) == -signal.SIGKILL, "the wheel did not publish"
    finally:
        second.stop(signal.SIGKILL)
    delivered = offline(second.store_dir, "wheeled")
    assert 0 < len(delivered) < MESSAGES and max(Counter(k for k, _ in delivered).values()) == 1
    never_early(delivered, parked)
    # 3. Restarted again: the unmarked decision is checked, found relocated, not appended again;
    # the others go at their time.
    third = start_broker(tmp_path, queries=RESOLVERS, extra_args=off, port=port)
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
    """The driver dies after its POST of a batch whose decisions the wheel holds: the wheel
    delivers them at T on its own, and the restarted job's replay of that batch is answered
    "already published" (nothing appended twice)."""
    marker = tmp_path / "after_post_ahead.killed"
    running = start_broker(
        tmp_path,
        queries=RESOLVERS,
        env={"SPARKMQ_TEST_OPERATOR_FAULT": f"after_post_ahead:{marker}"},
        extra_args=LOOKAHEAD,
    )
    try:
        # Level-1 messages through the query's first batch (its Python workers start: up to a
        # minute on a loaded machine), so the timers below are decided by a warm one.
        warm = produce_delayed(running, "replayed", 5, 1, "warm")
        warm = [dict(r, due_ms=r["store_timestamp"] + 1000) for r in warm]  # level 1: 1 s
        delivered_once(running, "replayed", warm)
        parked = produce_timers(running, "replayed", DRIVER_DELAY_MS)
        wait_until(marker.exists, JOB_START_TIMEOUT_S, "the driver to be killed after a POST ahead")
        killed_batch = int(marker.read_text().split()[1])
        got = delivered_once(running, "replayed", warm + parked)
        never_early([(m["uniq_key"], m["store_timestamp"]) for m in got], warm + parked)
        wait_until(lambda: running.operators()["job"]["restarts"] >= 1, 120, "the job to be restarted")
        wait_until(
            lambda: (running.delay_operator().get("last_batch_id") or -1) >= killed_batch,
            JOB_START_TIMEOUT_S,
            f"the restarted job to replay batch {killed_batch}",
        )
        assert Counter(all_keys(running, "replayed")) == Counter(r["uniq_key"] for r in warm + parked)
        assert running.delay_operator().get("wheel_pending") == 0
    finally:
        running.stop(signal.SIGKILL)
    # The killed batch's decisions did go through the wheel ("due at T" records of that batch).
    written = {key for key, _ in offline(running.store_dir, WHEEL_TOPIC) if key}
    assert f"wheel:delay:{killed_batch}:0" in written, f"batch {killed_batch} wrote no due-at-T record"
