"""The delay wheel across a master failover with decisions outstanding (issue 32): a sync replica
group of two ``sparkmq serve`` processes, each with its operator job (local Spark), real
ZooKeeper. The master's resolver decides level and timer messages a window ahead; once the "due at
T" records are on the slave (read from its store directory) and before any is due, the master is
killed with ``kill -9`` (its process group: the operator job dies with it). The slave leads, its
wheel loads the replicated decisions and delivers each message at T; then its own resolver, which
starts from an empty checkpoint, decides the same messages again and must append nothing.

Each message is checked one by one on the new master: delivered exactly once (by UNIQ_KEY), never
before its due time, within :data:`LATE_BOUND_MS` of its due time or of the failover, and by the
replayed decisions (the wheel's ``wheel_replayed_total`` in ``GET /operators``)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from store import StoreReader, UnknownTopic
from store.publish import WHEEL_TOPIC
from store.publish.due_records import (
    DECISION_QUEUE,
    PROGRESS_QUEUE,
    Progress,
    decode_decision,
    decode_progress,
)
from tests.support.cluster import ProcessCluster
from tests.support.reads import all_messages
from tests.support.turns import TURN_WAIT_S, several_spark_jobs  # noqa: F401 (a fixture)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]

#: A Spark driver's start and its query's first batch on a loaded 2-core machine.
JOB_TIMEOUT_S = 420.0
#: Wide enough that the resolver's next batch decides every message below at once (a batch takes
#: 1-20 s here under load), so each waits in the wheel.
LOOKAHEAD = ("--wheel-lookahead", "60s")
ARGS = (
    "--operators", "local", "--operator-queries", "delay", "--replication", "sync", "--min-insync", "1",
    *LOOKAHEAD,
)  # fmt: skip
#: Level 5 of the default table (1 min), and the timer messages' delay: room for the resolver to
#: read the messages (one micro-batch) and decide them (the next: 5-20 s each at load 12-15),
#: then the kill and the election, before the first is due.
LEVEL, LEVEL_MS = 5, 60_000
TIMER_DELAY_MS = 60_000
MESSAGES = 10  # of each kind
#: The kill must come this long before the first due time (the election takes a few seconds).
KILL_MARGIN_MS = 5_000
#: A message goes out at most this late after its due time or the failover, whichever is later.
LATE_BOUND_MS = 20_000


def delay_operator(http: httpx.Client) -> dict[str, Any]:
    found = [op for op in http.get("/operators").json()["operators"] if op["operator"] == "delay"]
    return found[0] if found else {}


def produce(http: httpx.Client) -> list[dict[str, Any]]:
    """``MESSAGES`` level messages and ``MESSAGES`` timer messages, each with its ``due_ms``."""
    parked = []
    for i in range(MESSAGES):
        sent = http.post("/topics/late/messages", json={"body": f"level-{i}", "delay_level": LEVEL})
        assert sent.status_code == 201, sent.text
        parked.append(dict(sent.json(), due_ms=sent.json()["store_timestamp"] + LEVEL_MS))
    entries = [{"body": f"timer-{i}", "delay_ms": TIMER_DELAY_MS + 97 * i} for i in range(MESSAGES)]
    sent = http.post("/topics/late/messages:batch", json={"messages": entries})
    assert sent.status_code == 201, sent.text
    for entry, result in zip(entries, sent.json()["results"], strict=True):
        asked = result["store_timestamp"] + entry["delay_ms"]
        parked.append(dict(result, due_ms=-(-asked // 1000) * 1000))  # up to the second (RocketMQ 5)
    assert Counter(r["topic"] for r in parked) == {
        "SCHEDULE_TOPIC_XXXX": MESSAGES,
        "rmq_sys_wheel_timer": MESSAGES,
    }
    return parked


def outstanding(store_dir: Path) -> tuple[int, set[tuple[int, int]]]:
    """The wheel's decisions not yet published in a store directory (read without its lock, as
    the job's executors do): how many, and the parked records they name (``(-1, CommitLog
    offset)`` of a timer message, ``(level queue, queue offset)`` of a level message)."""
    named: set[tuple[int, int]] = set()
    with StoreReader(store_dir) as reader:
        try:
            bounds = reader.queue_offsets(WHEEL_TOPIC)
        except UnknownTopic:
            return 0, named
        low, high = bounds.get(PROGRESS_QUEUE, (0, 0))
        progress = Progress(0)
        if high > low:
            newest = reader.read_batch(WHEEL_TOPIC, PROGRESS_QUEUE, high - 1, 1).batch
            progress = decode_progress(newest.column("body")[0].as_py())
        offset, high = bounds[DECISION_QUEUE]
        rows: list[tuple[int, bytes]] = []
        while offset < high:
            page = reader.read_batch(WHEEL_TOPIC, DECISION_QUEUE, offset, high - offset)
            columns = (page.batch.column("queue_offset").to_pylist(), page.batch.column("body").to_pylist())
            rows.extend(zip(*columns, strict=True))
            if page.next_offset <= offset:
                break
            offset = page.next_offset
    count = 0
    for queue_offset, body in rows:
        if progress.published(queue_offset):
            continue
        count += 1
        for request in decode_decision(body).requests:
            if request["commitlog_offset"] >= 0:
                named.add((-1, int(request["commitlog_offset"])))
            else:
                first = int(request["queue_offset"])
                named |= {(int(request["queue_id"]), first + k) for k in range(int(request["count"]))}
    return count, named


def parked_name(result: dict[str, Any]) -> tuple[int, int]:
    if result["topic"] == "SCHEDULE_TOPIC_XXXX":
        return result["queue_id"], result["queue_offset"]
    return -1, result["commitlog_offset"]


@pytest.mark.timeout(600 + TURN_WAIT_S)
@pytest.mark.usefixtures("several_spark_jobs")
def test_the_new_master_delivers_the_decisions_outstanding_at_the_kill(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        old = cluster.add("b1", ha=True, args=ARGS, member="b1-a")
        wait_until(lambda: "master" in cluster.roles("b1-a").values(), 30, "b1-a to lead")
        new = cluster.add("b1", ha=True, args=ARGS, member="b1-b")
        wait_until(lambda: cluster.pair_in_sync("b1-a"), 60, "b1-b in sync")
        with cluster.http("b1-a") as http:
            assert http.put("/topics/late", json={"queues": 2}).status_code == 201
            # One message through the master's first resolver batch (Spark's start and the
            # query's Python workers), so the messages below are decided by a warm one.
            warm = http.post("/topics/warm/messages", json={"body": "w", "delay_level": 1})
            assert warm.status_code == 201, warm.text
            wait_until(lambda: all_messages(http, "warm"), JOB_TIMEOUT_S, "the warm-up message")
            parked = produce(http)
            wanted = {parked_name(r) for r in parked}
            kill_by_ms = min(r["due_ms"] for r in parked) - KILL_MARGIN_MS
            # Every message decided ahead, its "due at T" record replicated to the slave.

            def replicated() -> tuple[int, set[tuple[int, int]]] | None:
                found = outstanding(new.store_dir)
                return found if wanted <= found[1] else None

            replicated_now = wait_until(
                replicated,
                max(1.0, (kill_by_ms - time.time() * 1000) / 1000),
                "the slave to hold a decision for every message before the first is due",
                poll_s=0.2,
            )
            assert replicated_now is not None
            decisions = replicated_now[0]
            assert all_messages(http, "late") == [], "the old master's wheel published before its time"
            old.kill()  # kill -9 of its process group: the broker and its operator job
        assert time.time() * 1000 < min(r["due_ms"] for r in parked), "killed after a message was due"
        wait_until(lambda: list(cluster.roles("b1-b").values()) == ["master"], 30, "b1-b to lead")
        led_ms = int(time.time() * 1000)
        with cluster.http("b1-b") as http:
            by_key = {r["uniq_key"]: r for r in parked}
            last_due_s = max(r["due_ms"] for r in parked) / 1000 - time.time()

            def delivered() -> list[dict[str, Any]]:
                found = all_messages(http, "late")
                return found if set(by_key) <= {m["uniq_key"] for m in found} else []

            got = wait_until(
                delivered,
                last_due_s + LATE_BOUND_MS / 1000,
                "every delayed message on the new master",
                poll_s=0.2,
            )
            assert Counter(m["uniq_key"] for m in got) == Counter(r["uniq_key"] for r in parked), (
                "a message twice, or one extra"
            )
            for message in got:
                due = by_key[message["uniq_key"]]["due_ms"]
                at = message["store_timestamp"]
                assert at >= due, f"{message['body']} delivered {due - at} ms early"
                assert at <= max(due, led_ms) + LATE_BOUND_MS, f"{message['body']} {at - due} ms late"
            # Delivered by the decisions the wheel loaded when b1-b started to lead.
            wheel = delay_operator(http)
            assert wheel["wheel_loaded_total"] == decisions, wheel
            assert wheel["wheel_replayed_total"] == len(parked), wheel
            # b1-b's own resolver (empty checkpoint) reads the parked records again and decides
            # them again: each found relocated, nothing appended twice.
            wait_until(
                lambda: (
                    (op := delay_operator(http)).get("last_published_batch", -1) >= 0
                    and op.get("input_lag") == 0
                    and op.get("pending") == 0
                    and op.get("wheel_pending") == 0
                ),
                JOB_TIMEOUT_S,
                "b1-b's resolver to decide the parked messages again",
            )
            again = all_messages(http, "late")
            assert Counter(m["uniq_key"] for m in again) == Counter(r["uniq_key"] for r in parked), (
                "delivered again after re-resolution"
            )
