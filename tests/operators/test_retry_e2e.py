"""The retry ladder end to end: a real ``sparkmq serve`` with its operator job (the retry and
delay resolvers on local Spark), a short level table, send-backs over HTTP, duplicates, the DLQ,
and a dead letter re-sent to its topic."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, all_messages, start_broker
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SHORT_LEVELS = ("--delay-levels", "1s 1s 1s 1s 1s 1s 1s 1s")

#: The resolvers this module exercises (the operator job runs only these).
RESOLVERS = "delay,retry"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker and operator job for the module's tests that need no kill: each uses topics
    and groups of its own (``work``/``billing``; ``work2``/``fast``) and asserts only on those,
    so neither sees the other's messages whatever the order."""
    running = start_broker(
        tmp_path_factory.mktemp("retry-broker"), queries=RESOLVERS, extra_args=SHORT_LEVELS
    )
    yield running
    running.stop(signal.SIGKILL)


def send_back(
    broker: Broker, group: str, topic: str, msg_id: str, key: str | None = None, **extra: Any
) -> dict[str, Any]:
    headers = {"Idempotency-Key": key} if key else {}
    with broker.http as http:
        response = http.post(
            f"/groups/{group}/messages:sendBack",
            json={"topic": topic, "msg_id": msg_id, **extra},
            headers=headers,
        )
        assert response.status_code == 200, response.text
        return dict(response.json())


def copies(broker: Broker, topic: str, uniq_key: str, count: int) -> list[dict[str, Any]]:
    """Wait until ``topic`` holds ``count`` messages with ``uniq_key``; never more."""

    def mine() -> list[dict[str, Any]]:
        return [m for m in all_messages(broker, topic) if m["uniq_key"] == uniq_key]

    wait_until(lambda: len(mine()) >= count, JOB_START_TIMEOUT_S, f"{count} copies in {topic}", poll_s=0.5)
    found = mine()
    assert len(found) == count, [m["reconsume_times"] for m in found]
    return found


@pytest.mark.parametrize("who", ["driver", "broker"])
def test_send_backs_survive_kill9(tmp_path: Path, who: str) -> None:
    """kill -9 of the operator driver before its POST, then (in its next life) right after it;
    or of the broker right after it decided a relocation batch: every send-back still gives
    exactly one retry."""
    points = ("before_post", "after_post") if who == "driver" else ("decided",)
    markers = [tmp_path / f"{point}.killed" for point in points]
    variable = "SPARKMQ_TEST_OPERATOR_FAULT" if who == "driver" else "SPARKMQ_TEST_RELOCATION_FAULT"
    faults = ";".join(f"{marker.stem}:{marker}" for marker in markers)
    first = start_broker(tmp_path, queries=RESOLVERS, extra_args=SHORT_LEVELS, env={variable: faults})
    running = first
    try:
        with first.http as http:
            http.put("/groups/g", json={})
            sent = [http.post("/topics/k/messages", json={"body": f"m{i}"}).json() for i in range(6)]
        for m in sent:
            send_back(first, "g", "k", m["msg_id"])
            send_back(first, "g", "k", m["msg_id"])  # a duplicate of the same attempt
        if who == "broker":
            assert first.process.wait(JOB_START_TIMEOUT_S) == -signal.SIGKILL, "the broker did not crash"
            running = start_broker(
                tmp_path, queries=RESOLVERS, extra_args=SHORT_LEVELS, port=int(first.url.rsplit(":", 1)[1])
            )
        for m in sent:
            copies(running, "%RETRY%g", m["uniq_key"], 1)
        assert all(marker.exists() for marker in markers), "not every kill happened"
        assert len(all_messages(running, "%RETRY%g")) == len(sent)
    finally:
        running.stop(signal.SIGKILL)
        if running is not first:
            first.stop(signal.SIGKILL)


# The tests on the module's shared broker come last: it is torn down at the module's end, so
# its idle operator job would otherwise run beside each kill test's own broker and job.


def test_the_full_ladder_duplicates_the_dlq_and_a_resend(broker: Broker) -> None:
    with broker.http as http:
        assert http.put("/groups/billing", json={"max_reconsume_times": 3}).json()["max_reconsume_times"] == 3
        original = http.post(
            "/topics/work/messages", json={"body": "charge", "tags": "t", "properties": {"p": "1"}}
        ).json()
    uniq = original["uniq_key"]
    current = original["msg_id"]
    for attempt in range(3):
        first = send_back(broker, "billing", "work", current, key=f"a{attempt}")
        assert (first["outcome"], first["attempt"], first["target_topic"]) == (
            "retry",
            attempt,
            "%RETRY%billing",
        )
        send_back(broker, "billing", "work", current, key=f"a{attempt}")  # a retried request
        send_back(broker, "billing", "work", current)  # a second consumer racing: same attempt
        retried = copies(broker, "%RETRY%billing", uniq, attempt + 1)
        latest = max(retried, key=lambda m: m["reconsume_times"])
        assert latest["reconsume_times"] == attempt + 1
        assert latest["topic"] == "work", "a retry is read under its original topic (RETRY_TOPIC)"
        props = latest["properties"]
        assert props["RETRY_TOPIC"] == "work" and props["ORIGIN_MESSAGE_ID"] == original["msg_id"]
        assert props["p"] == "1" and latest["tags"] == "t" and latest["body"] == "charge"
        current = latest["msg_id"]
    dead = send_back(broker, "billing", "work", current)
    assert (dead["outcome"], dead["attempt"]) == ("dlq", 3)
    (letter,) = copies(broker, "%DLQ%billing", uniq, 1)
    assert letter["reconsume_times"] == 4 and letter["properties"]["DELAY"] == "0"
    assert letter["properties"]["ORIGIN_MESSAGE_ID"] == original["msg_id"]
    with broker.http as http:
        listed = http.get("/groups/billing/dlq").json()["messages"]
        assert [m["uniq_key"] for m in listed] == [uniq]
        assert http.get("/topics/%25DLQ%25billing").json()["queues"] == 1
        resent = http.post(f"/groups/billing/dlq/{letter['msg_id']}:resend")
        assert resent.status_code == 201, resent.text
        assert resent.json()["topic"] == "work"
    back = [m for m in all_messages(broker, "work") if m["uniq_key"] == uniq]
    assert len(back) == 2 and back[-1]["reconsume_times"] == 0 and back[-1]["properties"] == {"p": "1"}


def test_straight_to_the_dlq_and_refusals(broker: Broker) -> None:
    with broker.http as http:
        http.put("/groups/fast", json={})
        m = http.post("/topics/work2/messages", json={"body": "poison"}).json()
        assert (
            http.post("/groups/fast/messages:sendBack", json={"topic": "work2", "msg_id": "nope"}).status_code
            == 404
        )
        assert (
            http.post(
                "/groups/ghost/messages:sendBack", json={"topic": "work2", "msg_id": m["msg_id"]}
            ).status_code
            == 404
        )
        assert (
            http.post(
                "/groups/fast/messages:sendBack", json={"topic": "nowhere", "msg_id": m["msg_id"]}
            ).status_code
            == 404
        )
        bad = http.post(
            "/groups/fast/messages:sendBack",
            json={"topic": "work2", "msg_id": m["msg_id"], "delay_level": -2},
        )
        assert bad.status_code == 400
    result = send_back(broker, "fast", "work2", m["uniq_key"], delay_level=-1)
    assert result["outcome"] == "dlq"
    (letter,) = copies(broker, "%DLQ%fast", m["uniq_key"], 1)
    assert letter["reconsume_times"] == 1


def test_an_idle_retry_query_runs_no_batch(broker: Broker) -> None:
    """The retry resolver has no timers, so its query runs a batch only when a send-back
    arrives (the delay query, timed, runs one at every trigger), and a send-back after a quiet
    spell is still resolved."""

    def batches() -> dict[str, int | None]:
        return {op["operator"]: op.get("last_batch_id") for op in broker.operators()["operators"]}

    with broker.http as http:
        http.put("/groups/idle", json={})
        m = http.post("/topics/quiet/messages", json={"body": "b"}).json()
    send_back(broker, "idle", "quiet", m["msg_id"])
    copies(broker, "%RETRY%idle", m["uniq_key"], 1)
    wait_until(lambda: batches().get("retry") is not None, 30, "the retry query's status")
    before = batches()
    wait_until(lambda: (batches()["delay"] or 0) >= (before["delay"] or 0) + 4, 60, "four delay batches")
    assert batches()["retry"] == before["retry"], "the retry query ran a batch with no send-back"
    with broker.http as http:
        later = http.post("/topics/quiet/messages", json={"body": "c"}).json()
    send_back(broker, "idle", "quiet", later["msg_id"], delay_level=-1)
    (letter,) = copies(broker, "%DLQ%idle", later["uniq_key"], 1)
    assert letter["reconsume_times"] == 1
    wait_until(lambda: (batches()["retry"] or 0) > (before["retry"] or 0), 30, "a retry batch for it")
