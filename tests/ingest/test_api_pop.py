"""POP over HTTP on a real broker: receive, ack, change invisible time, bad input, long polls
on the event loop, and the group-kind rule at the offset routes."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import time
from pathlib import Path
from typing import Any

import httpx

from tests.ingest.conftest import BrokerFactory, RunningBroker
from tests.support.waiting import wait_until


def _produce(client: httpx.Client, topic: str, count: int, queues: int = 2) -> None:
    assert client.put(f"/topics/{topic}", json={"queues": queues}).status_code in (200, 201)
    messages = [{"body": f"m{i}"} for i in range(count)]
    assert client.post(f"/topics/{topic}/messages:batch", json={"messages": messages}).status_code == 201


def _receive(client: httpx.Client, group: str, topic: str, **spec: Any) -> httpx.Response:
    return client.post(f"/groups/{group}/topics/{topic}/messages:receive", json=spec)


def _state(client: httpx.Client, group: str, topic: str) -> list[str]:
    """Everything the group can receive now (short invisible time), bodies sorted."""
    got = _receive(client, group, topic, max_messages=32, invisible_ms=1000).json()["messages"]
    return sorted(m["body"] for m in got)


def test_receive_ack_and_change(client: httpx.Client, topic: str) -> None:
    _produce(client, topic, 5)
    first = _receive(client, "g", topic, max_messages=3, invisible_ms=60_000)
    assert first.status_code == 200, first.text
    got = first.json()["messages"]
    assert len(got) == 3 and all(m["delivery_attempt"] == 1 for m in got)
    rest = _receive(client, "g", topic, max_messages=32, invisible_ms=60_000).json()["messages"]
    assert sorted(m["body"] for m in got + rest) == [f"m{i}" for i in range(5)]
    handles = [m["receipt_handle"] for m in got]
    changed = client.post(
        "/groups/g/messages:changeInvisible", json={"receipt_handle": handles[0], "invisible_ms": 90_000}
    )
    assert changed.status_code == 200, changed.text
    new_handle = changed.json()["receipt_handle"]
    assert new_handle != handles[0] and changed.json()["msg_id"] == got[0]["msg_id"]
    acked = client.post(
        "/groups/g/messages:ack", json={"receipt_handles": [new_handle, handles[0], *handles[1:]]}
    )
    assert acked.status_code == 200
    results = acked.json()["results"]
    assert [r["ok"] for r in results] == [True, False, True, True]
    assert results[1]["error"] == "receipt_handle_expired" and results[1]["status"] == 409
    assert acked.json()["acked"] == 3
    stale = client.post(
        "/groups/g/messages:changeInvisible", json={"receipt_handle": handles[1], "invisible_ms": 5_000}
    )
    assert stale.status_code == 409 and stale.json()["error"] == "receipt_handle_expired"


def test_unacked_comes_back_with_attempt_two(client: httpx.Client, topic: str) -> None:
    _produce(client, topic, 1, queues=1)
    got = _receive(client, "g", topic, invisible_ms=1000).json()["messages"]
    assert [m["delivery_attempt"] for m in got] == [1]
    again = _receive(client, "g", topic, invisible_ms=1000, wait_ms=5000).json()["messages"]
    assert [(m["body"], m["delivery_attempt"]) for m in again] == [("m0", 2)]
    late = client.post("/groups/g/messages:ack", json={"receipt_handles": [got[0]["receipt_handle"]]})
    assert late.json()["results"][0]["error"] == "receipt_handle_expired"


def _forged(handle: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)))
    raw[10] ^= 1  # the queue offset: another message, same signature
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def test_bad_input_gets_clear_errors_and_leaves_state(client: httpx.Client, topic: str) -> None:
    _produce(client, topic, 4, queues=1)
    got = _receive(client, "g", topic, max_messages=2, invisible_ms=60_000).json()["messages"]
    handle = got[0]["receipt_handle"]
    cases = {
        "not-a-handle!": "invalid_receipt_handle",
        "QUJD": "invalid_receipt_handle",
        _forged(handle): "invalid_receipt_handle",
    }
    for text, code in cases.items():
        answer = client.post("/groups/g/messages:ack", json={"receipt_handles": [text]}).json()
        assert answer["results"][0]["error"] == code and answer["results"][0]["status"] == 404
        change = client.post(
            "/groups/g/messages:changeInvisible", json={"receipt_handle": text, "invisible_ms": 5000}
        )
        assert change.status_code == 404 and change.json()["error"] == code
    other_group = client.post("/groups/h/messages:ack", json={"receipt_handles": [handle]}).json()
    assert other_group["results"][0]["error"] == "receipt_handle_mismatch"
    for field, value in (
        ("max_messages", 33),
        ("max_messages", 0),
        ("invisible_ms", 10),
        ("invisible_ms", 13 * 3_600_000),
        ("wait_ms", -1),
        ("wait_ms", 10**9),
    ):
        answer = _receive(client, "g", topic, **{field: value})
        assert (answer.status_code, answer.json()["error"]) == (422, "validation_error"), field
        assert answer.json()["message"].startswith(f"body.{field}:")
    out_of_range = client.post(
        "/groups/g/messages:changeInvisible", json={"receipt_handle": handle, "invisible_ms": 0}
    )
    assert out_of_range.status_code == 422 and "invisible_ms" in out_of_range.json()["message"]
    malformed = client.post("/groups/g/messages:ack", json={"receipt_handles": "x"})
    assert malformed.status_code == 422
    # Nothing above changed the state: the two in flight still ack, the other two are receivable.
    acked = client.post(
        "/groups/g/messages:ack", json={"receipt_handles": [m["receipt_handle"] for m in got]}
    )
    assert acked.json()["acked"] == 2
    assert _state(client, "g", topic) == ["m2", "m3"]


def test_group_kind_is_enforced_at_the_offset_routes(client: httpx.Client, topic: str) -> None:
    _produce(client, topic, 2, queues=1)
    assert _receive(client, "popper", topic).status_code == 200
    commit = client.put("/groups/popper/offsets", json={"topic": topic, "offsets": {"0": 1}})
    assert commit.status_code == 409 and commit.json()["error"] == "group_kind_conflict"
    assert (
        client.put("/groups/offsets-g/offsets", json={"topic": topic, "offsets": {"0": 1}}).status_code == 200
    )
    refused = _receive(client, "offsets-g", topic)
    assert refused.status_code == 409 and refused.json()["error"] == "group_kind_conflict"


def test_waiting_receives_hold_no_worker_thread(shared_broker: RunningBroker, topic: str) -> None:
    """More waiting receives than the worker pool has threads: the broker still answers."""
    with shared_broker.client() as client:
        assert client.put(f"/topics/{topic}", json={"queues": 1}).status_code in (200, 201)
    waiting = 60
    with concurrent.futures.ThreadPoolExecutor(waiting) as pool:
        http = httpx.Client(
            base_url=shared_broker.url, timeout=30.0, limits=httpx.Limits(max_connections=100)
        )
        futures = [
            pool.submit(_receive, http, "waiters", topic, max_messages=1, invisible_ms=60_000, wait_ms=8000)
            for _ in range(waiting)
        ]
        time.sleep(0.5)  # let them all reach the broker and wait
        started = time.monotonic()
        assert http.get("/topics").status_code == 200
        sent = http.post(f"/topics/{topic}/messages", json={"body": "wake"})
        assert sent.status_code == 201
        assert time.monotonic() - started < 2.0
        answers = [f.result(timeout=30) for f in futures]
        http.close()
    bodies = [m["body"] for a in answers for m in a.json()["messages"]]
    assert bodies == ["wake"]


def test_consume_right_on_the_topic_of_each_handle(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    tokens = {
        "tokens": [
            {"name": "admin", "token": "admin-token", "admin": ["*"], "produce": ["*"], "consume": ["*"]},
            {"name": "reader", "token": "reader-token", "consume": ["orders"]},
        ]
    }
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps(tokens))
    broker = broker_factory(auth_file=auth_file)
    admin, reader = broker.client("admin-token"), broker.client("reader-token")
    _produce(admin, "orders", 1, queues=1)
    _produce(admin, "payments", 1, queues=1)
    assert _receive(reader, "g", "payments").status_code == 403
    mine = _receive(reader, "g", "orders").json()["messages"]
    theirs = _receive(admin, "g", "payments").json()["messages"]
    handles = [mine[0]["receipt_handle"], theirs[0]["receipt_handle"]]
    refused = reader.post("/groups/g/messages:ack", json={"receipt_handles": handles})
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    change = {"receipt_handle": theirs[0]["receipt_handle"], "invisible_ms": 5000}
    assert reader.post("/groups/g/messages:changeInvisible", json=change).status_code == 403
    assert reader.post("/groups/g/messages:ack", json={"receipt_handles": handles[:1]}).json()["acked"] == 1


def _listed(client: httpx.Client, group: str) -> dict[str, Any]:
    """The group's row in ``GET /groups``' summaries."""
    answer = client.get("/groups")
    assert answer.status_code == 200, answer.text
    rows = [row for row in answer.json()["summaries"] if row["group"] == group]
    assert len(rows) == 1, answer.json()
    return dict(rows[0])


def test_pop_groups_are_listed_with_kind_and_inflight_counts(client: httpx.Client, topic: str) -> None:
    pop_group, offset_group = f"{topic}-pop", f"{topic}-offsets"
    _produce(client, topic, 5)
    got = _receive(client, pop_group, topic, max_messages=3, invisible_ms=60_000).json()["messages"]
    assert len(got) == 3
    row = _listed(client, pop_group)
    assert (row["kind"], row["topics"]) == ("pop", [topic])
    assert row["pop"]["inflight"] == 3 and row["pop"]["visible_again"] == 0
    assert row["pop"]["oldest_inflight_age_ms"] >= 0
    assert pop_group not in client.get("/groups").json()["groups"]  # the offset groups' map (Kafka's)

    acked = client.post(
        f"/groups/{pop_group}/messages:ack", json={"receipt_handles": [got[0]["receipt_handle"]]}
    )
    assert acked.json()["acked"] == 1
    assert _listed(client, pop_group)["pop"]["inflight"] == 2
    # Two more with a short invisible time: once it passes they are the backlog (visible again).
    assert len(_receive(client, pop_group, topic, max_messages=2, invisible_ms=1000).json()["messages"]) == 2
    counts = wait_until(
        lambda: (c := _listed(client, pop_group)["pop"])["visible_again"] == 2 and c, 10, "two visible again"
    )
    assert counts["inflight"] == 4
    rest = [m["receipt_handle"] for m in got[1:]]
    assert (
        client.post(f"/groups/{pop_group}/messages:ack", json={"receipt_handles": rest}).json()["acked"] == 2
    )
    after = _listed(client, pop_group)["pop"]
    assert (after["inflight"], after["visible_again"], after["dead_letters"]) == (2, 2, 0)

    # An offset-based group lists as before, and as an offset group with no POP counts.
    committed = client.put(f"/groups/{offset_group}/offsets", json={"topic": topic, "offsets": {"0": 1}})
    assert committed.status_code == 200, committed.text
    assert client.get("/groups").json()["groups"][offset_group] == [topic]
    assert _listed(client, offset_group) == {
        "group": offset_group,
        "kind": "offset",
        "topics": [topic],
        "pop": None,
    }
