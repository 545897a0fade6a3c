"""The gRPC door over the real broker core (a lone broker: uvicorn, the store, POP, the
transaction board), driven by RocketMQ 5's official Python client in its own venv; what the
client wrote is read back over the HTTP door, as the same CommitLog records."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import sharding_queue
from tests.grpc.door_fixtures import DoorBroker, answer_check_back, start_door_broker
from tests.support.reads import all_messages
from tests.support.waiting import wait_until


@pytest.fixture
def door(tmp_path: Path, rocketmq5: Path) -> Iterator[DoorBroker]:
    running = start_door_broker(tmp_path / "store", tmp_path / "home")
    try:
        yield running
    finally:
        running.running.stop()


def produce(door: DoorBroker, topic: str, messages: list[dict[str, object]]) -> list[dict[str, object]]:
    lines = door.client("produce.py", {"topic": topic, "messages": messages})
    return [line for line in lines if "message_id" in line]


def test_normal_fifo_and_delayed_sends_are_the_records_every_door_reads(door: DoorBroker) -> None:
    with door.http() as http:
        assert http.put("/topics/orders", json={"queues": 4}).status_code in (200, 201)
        deliver_s = int(time.time()) + 3600
        fifo_sent: list[dict[str, object]] = [{"body": f"fifo-{i}", "message_group": "g1"} for i in range(3)]
        sent: list[dict[str, object]] = [
            {"body": "plain", "tag": "a", "keys": ["k1"], "properties": {"p": "1"}},
            *fifo_sent,
            {"body": "later", "delivery_timestamp": deliver_s},
        ]
        receipts = produce(door, "orders", sent)
        assert len(receipts) == 5
        stored = {m["uniq_key"]: m for m in all_messages(http, "orders")}
        plain, *fifo, later = (str(r["message_id"]) for r in receipts)
        assert stored[plain]["body"] == "plain" and stored[plain]["tags"] == "a"
        assert stored[plain]["properties"]["p"] == "1" and stored[plain]["keys"] == ["k1"]
        assert [stored[f]["body"] for f in fifo] == ["fifo-0", "fifo-1", "fifo-2"]
        assert {stored[f]["queue_id"] for f in fifo} == {sharding_queue("g1", 4)}  # the HTTP rule
        assert later not in stored  # parked until its time, like an HTTP deliver_at_ms
        parked = http.get(f"/messages/{receipts[4]['message_id']}")
        if parked.status_code == 200:
            assert parked.json()["properties"]["TIMER_DELIVER_MS"] == str(deliver_s * 1000)


def test_a_simple_consumer_receives_and_acks(door: DoorBroker) -> None:
    receipts = produce(door, "jobs", [{"body": f"job-{i}", "tag": "t"} for i in range(5)])
    got = door.client(
        "simple_consume.py",
        {"topic": "jobs", "group": "workers", "want": 5, "timeout_s": 30, "invisible_s": 20, "ack": True},
    )
    messages = [line for line in got if "message_id" in line]
    assert sorted(m["message_id"] for m in messages) == sorted(str(r["message_id"]) for r in receipts)
    assert {(m["attempt"], m["tag"], m["topic"]) for m in messages} == {(1, "t", "jobs")}
    again = door.client(
        "simple_consume.py",
        {"topic": "jobs", "group": "workers", "want": 1, "timeout_s": 6, "invisible_s": 20, "ack": True},
    )
    assert again == [{"done": 0}]  # every one acked: nothing comes back


def test_an_unacked_message_comes_back_as_attempt_2_then_goes_to_the_dlq(door: DoorBroker) -> None:
    door.broker.pop.configure_group("flaky", max_retries=1)  # two deliveries, then the DLQ
    (receipt,) = produce(door, "tasks", [{"body": "fails twice"}])
    spec = {"topic": "tasks", "group": "flaky", "want": 1, "timeout_s": 20, "invisible_s": 2, "ack": False}
    first = [m for m in door.client("simple_consume.py", spec) if "message_id" in m]
    second = [m for m in door.client("simple_consume.py", spec) if "message_id" in m]
    assert [(m["message_id"], m["attempt"]) for m in first + second] == [
        (receipt["message_id"], 1),
        (receipt["message_id"], 2),
    ]
    with door.http() as http:
        wait_until(lambda: all_messages(http, "%DLQ%flaky"), timeout_s=15, what="the dead letter")
        (dead,) = all_messages(http, "%DLQ%flaky")
    assert dead["uniq_key"] == receipt["message_id"] and dead["body"] == "fails twice"


def test_change_invisible_duration_hides_longer_and_the_new_handle_acks(door: DoorBroker) -> None:
    produce(door, "slow", [{"body": "takes a while"}])
    got = door.client(
        "simple_consume.py",
        {
            "topic": "slow",
            "group": "patient",
            "want": 1,
            "timeout_s": 20,
            "invisible_s": 2,
            "change_invisible_s": 30,
            "hold_s": 3,
            "ack": True,
        },
    )
    assert got[0] == {"received_while_hidden": 0}  # past the first 2 s, still hidden
    assert got[1]["acked"] is True and got[-1] == {"done": 1}  # the ack used the new handle
    again = door.client(
        "simple_consume.py",
        {"topic": "slow", "group": "patient", "want": 1, "timeout_s": 6, "invisible_s": 2, "ack": True},
    )
    assert again == [{"done": 0}]


def test_two_push_consumers_of_a_group_see_each_message_once(door: DoorBroker) -> None:
    receipts = produce(door, "events", [{"body": f"event-{i}"} for i in range(40)])
    got = door.client(
        "push_consume.py",
        {"topic": "events", "group": "pushers", "consumers": 2, "want": 40, "timeout_s": 60, "settle_s": 3},
    )
    handled = [line for line in got if "message_id" in line]
    counts = Counter(line["message_id"] for line in handled)
    assert counts == Counter(str(r["message_id"]) for r in receipts)  # each exactly once


def test_transactions_commit_roll_back_and_answer_a_check_back(door: DoorBroker) -> None:
    assert door.broker.operators is not None and door.broker.operators.transactions is not None
    board = door.broker.operators.transactions
    join = door.in_background("transact.py", {"topic": "payments", "rollback": True})
    with door.http() as http:
        txid = answer_check_back(http, "payments", batch_id=0, sent=3)
        lines = join()
        by_kind = {next(iter(line)): line for line in lines}
        assert by_kind["orphan"]["orphan"] == txid and by_kind["checked"]["checked"] == [txid]
        wait_until(lambda: len(all_messages(http, "payments")) == 2, timeout_s=10, what="two commits")
        bodies = sorted(m["body"] for m in all_messages(http, "payments"))
    assert bodies == ["committed by the client", "left to the check-back"]  # the rollback: never
    assert board.dispatcher.stats.outcomes["pushed"] == 1
