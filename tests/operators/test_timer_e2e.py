"""Timer messages end to end (a real ``sparkmq serve`` and its operator job on local Spark):
``delay_ms`` / ``deliver_at_ms`` delivered once and never early, rolls past the roll window,
and catch-up after the operators were down."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, all_messages, start_broker
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay"


def produce(broker: Broker, topic: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with broker.http as http:
        response = http.post(f"/topics/{topic}/messages:batch", json={"messages": entries})
        assert response.status_code == 201, response.text
        return list(response.json()["results"])


def delivered(broker: Broker, topic: str, uniq_keys: set[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """Wait for every key in ``topic``; none twice, none extra."""

    def arrived() -> list[dict[str, Any]] | None:
        got = all_messages(broker, topic)
        return got if uniq_keys <= {m["uniq_key"] for m in got} else None

    got = wait_until(arrived, timeout_s, f"{len(uniq_keys)} timer messages in {topic}", poll_s=0.5)
    counts = Counter(m["uniq_key"] for m in got)
    assert {k: n for k, n in counts.items() if n > 1} == {}, "a timer message was delivered twice"
    assert set(counts) == uniq_keys, "unexpected messages in the topic"
    return {m["uniq_key"]: m for m in got}


def test_timers_are_delivered_once_never_early_and_roll(tmp_path: Path) -> None:
    # The broker's default wheel look-ahead (10 s, capped at the 2 s roll window by the resolver).
    broker = start_broker(tmp_path, queries=RESOLVERS, extra_args=("--timer-roll-window", "2s"))
    try:
        wait_until(
            lambda: broker.delay_operator().get("state") == "active", JOB_START_TIMEOUT_S, "the delay query"
        )
        # The query's first batch with data starts its Python workers (45-55 s at load 7-15): a
        # warm-up message through it first, so the rolled timer's roll is not stuck behind it.
        # A roll that comes within the look-ahead of the due time is delivered at T by the wheel
        # instead of re-parked (the design: re-parking then would cost a micro-batch of lateness).
        warm = produce(broker, "warm-up", [{"body": "w", "delay_ms": 1000}])
        delivered(broker, "warm-up", {warm[0]["uniq_key"]}, JOB_START_TIMEOUT_S)
        now = int(time.time() * 1000)
        entries = [{"body": f"ms-{i}", "delay_ms": 2500 + 100 * i} for i in range(10)]
        entries += [{"body": f"at-{i}", "deliver_at_ms": now + 3000 + 137 * i} for i in range(10)]
        entries += [{"body": "past", "deliver_at_ms": now - 10_000}]
        # Many 2 s roll windows away: the resolver must see it and fire its roll more than the
        # look-ahead before it is due, which on a loaded 2-core machine (micro-batches of 10-15 s
        # once warm) needs a long way to go.
        entries += [{"body": "rolled", "delay_ms": 40_000}]
        results = produce(broker, "timed", entries)
        assert [r["topic"] for r in results] == ["rmq_sys_wheel_timer"] * 20 + [
            "timed",
            "rmq_sys_wheel_timer",
        ]
        by_key = {r["uniq_key"]: (e, r) for e, r in zip(entries, results, strict=True)}
        got = delivered(broker, "timed", set(by_key), 180)
        for key, message in got.items():
            entry, result = by_key[key]
            props = message["properties"]
            if entry["body"] == "past":
                assert message["queue_offset"] == result["queue_offset"] and "TIMER_OUT_MS" not in props
                continue
            asked = entry.get("deliver_at_ms") or result["store_timestamp"] + entry["delay_ms"]
            due = (asked // 1000 + (asked % 1000 > 0)) * 1000  # rounded up to the second
            assert message["store_timestamp"] >= due, (
                f"{entry['body']} delivered {due - message['store_timestamp']} ms early"
            )
            assert int(props["TIMER_OUT_MS"]) + 1000 >= asked
            assert (
                props["REAL_TOPIC"] == "timed" and "TIMER_ENQUEUE_MS" in props and "TIMER_DEQUEUE_MS" in props
            )
            assert int(props["TIMER_DEQUEUE_MS"]) >= due
        rolled = next(m for m in got.values() if m["body"] == "rolled")
        rolls = int(rolled["properties"].get("TIMER_ROLL_TIMES", "0"))
        assert rolls >= 1, "a timer due beyond the roll window was not rolled"
        # Each roll re-parked one copy in the timer topic, with the same UNIQ_KEY and TIMER_OUT_MS.
        copies = [
            m for m in all_messages(broker, "rmq_sys_wheel_timer") if m["uniq_key"] == rolled["uniq_key"]
        ]
        assert len(copies) == 1 + rolls
        assert {m["properties"]["TIMER_OUT_MS"] for m in copies} == {rolled["properties"]["TIMER_OUT_MS"]}
    finally:
        broker.stop(signal.SIGKILL)


def test_catch_up_after_the_operators_were_down(tmp_path: Path) -> None:
    """Messages due while no operator ran are delivered once, promptly, when it starts."""
    down = start_broker(tmp_path, queries=RESOLVERS, extra_args=("--operators", "off"))
    try:
        now = int(time.time() * 1000)
        entries = [{"body": f"l-{i}", "delay_level": 1} for i in range(40)]
        entries += [{"body": f"t-{i}", "deliver_at_ms": now + 1500 + i} for i in range(40)]
        results = produce(down, "caught", entries)
        keys = {r["uniq_key"] for r in results}
    finally:
        assert down.stop(signal.SIGTERM) == 0
    # the latest due time: a level-1 message's store time + 1 s, or the last timer's
    last_due_ms = max(max(r["store_timestamp"] for r in results) + 1000, now + 1500 + 39)
    wait_until(lambda: time.time() * 1000 > last_due_ms, 10, "everything to be overdue", poll_s=0.1)
    up = start_broker(tmp_path, queries=RESOLVERS)
    try:
        delivered(up, "caught", keys, JOB_START_TIMEOUT_S + 60)
    finally:
        up.stop(signal.SIGKILL)
