"""Transactional messages over HTTP against a real broker (no Spark): halves invisible until
committed, an idempotent end, multi-topic batches all or nothing, producer groups, refusals,
and the table rebuilt after a restart."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import BrokerFactory

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"


def bodies(client: httpx.Client, topic: str) -> list[str]:
    described = client.get(f"/topics/{topic}")
    if described.status_code == 404:
        return []
    out: list[str] = []
    for queue in described.json()["queue_offsets"]:
        page = client.get(f"/topics/{topic}/queues/{queue['queue_id']}/messages", params={"offset": 0})
        out += [m["body"] for m in page.json()["messages"]]
    return sorted(out)


def half(client: httpx.Client, topic: str, body: str, group: str = "pg", **extra: Any) -> dict[str, Any]:
    response = client.post(
        f"/topics/{topic}/messages", json={"body": body, "transaction": {"producer_group": group}, **extra}
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def end(client: httpx.Client, txid: str, action: str, group: str = "pg") -> httpx.Response:
    return client.post(f"/transactions/{txid}", json={"action": action, "producer_group": group})


def test_half_is_invisible_until_commit_and_the_end_is_idempotent(client: httpx.Client, topic: str) -> None:
    client.put(f"/topics/{topic}", json={"queues": 2})
    result = half(client, topic, "pay", keys=["order-1"], tags="paid")
    assert result["topic"] == HALF and result["transaction_id"] == result["uniq_key"]
    assert bodies(client, topic) == [], "nothing visible before the commit"
    listed = client.get("/transactions", params={"producer_group": "pg"}).json()["transactions"]
    mine = [t for t in listed if t["transaction_id"] == result["transaction_id"]]
    assert (
        mine and mine[0]["state"] == "prepared" and mine[0]["topics"] == [topic] and mine[0]["messages"] == 1
    )

    committed = end(client, result["transaction_id"], "commit")
    assert committed.status_code == 200, committed.text
    doc = committed.json()
    assert doc["state"] == "committed" and doc["ended_now"] is True
    assert [r["topic"] for r in doc["results"]] == [topic]
    assert doc["results"][0]["uniq_key"] == result["uniq_key"]  # UNIQ_KEY kept
    assert bodies(client, topic) == ["pay"]
    final = client.get(f"/messages/{doc['results'][0]['msg_id']}").json()
    assert final["properties"]["TRAN_MSG"] == "true" and final["properties"]["REAL_TOPIC"] == topic
    assert final["tags"] == "paid" and final["keys"] == ["order-1"]

    again = end(client, result["transaction_id"], "rollback")
    assert (
        again.status_code == 200
        and again.json()["state"] == "committed"
        and again.json()["ended_now"] is False
    )
    assert bodies(client, topic) == ["pay"], "a second end writes nothing"


def test_rollback_never_appears(client: httpx.Client, topic: str) -> None:
    result = half(client, topic, "never")
    rolled = end(client, result["transaction_id"], "rollback")
    assert rolled.status_code == 200 and rolled.json()["state"] == "rolled_back"
    assert bodies(client, topic) == []
    assert end(client, result["transaction_id"], "commit").json()["state"] == "rolled_back"
    assert bodies(client, topic) == []


def test_refusals(client: httpx.Client, topic: str) -> None:
    assert end(client, "NO_SUCH_TRANSACTION", "commit").status_code == 404
    result = half(client, topic, "x")
    wrong = end(client, result["transaction_id"], "commit", group="other")
    assert (wrong.status_code, wrong.json()["error"]) == (409, "producer_group_mismatch")
    delayed = client.post(
        f"/topics/{topic}/messages",
        json={"body": "x", "transaction": {"producer_group": "pg"}, "delay_ms": 1000},
    )
    assert (delayed.status_code, delayed.json()["error"], delayed.json()["field"]) == (
        400,
        "invalid_transaction",
        "delay_ms",
    )
    bad_action = client.post(
        f"/transactions/{result['transaction_id']}", json={"action": "maybe", "producer_group": "pg"}
    )
    assert bad_action.status_code == 422
    mixed = client.post(
        f"/topics/{topic}/messages:batch",
        json={"messages": [{"body": "a", "transaction": {"producer_group": "pg"}}, {"body": "b"}]},
    )
    assert (mixed.status_code, mixed.json()["error"]) == (400, "invalid_transaction")


def test_batch_is_one_transaction_across_topics_all_or_nothing(client: httpx.Client, topic: str) -> None:
    other = f"{topic}_b"
    entries = [{"body": "a1"}, {"body": "b1", "topic": other}, {"body": "a2"}]
    response = client.post(
        f"/topics/{topic}/messages:batch", json={"messages": entries, "transaction": {"producer_group": "pg"}}
    )
    assert response.status_code == 201, response.text
    doc = response.json()
    assert {r["topic"] for r in doc["results"]} == {HALF} and len(doc["results"]) == 3
    assert bodies(client, topic) == [] and bodies(client, other) == []
    committed = end(client, doc["transaction_id"], "commit").json()
    assert sorted(r["topic"] for r in committed["results"]) == [topic, topic, other]
    assert bodies(client, topic) == ["a1", "a2"] and bodies(client, other) == ["b1"]

    rolled = client.post(
        f"/topics/{topic}/messages:batch",
        json={
            "messages": [{"body": "z"}, {"body": "y", "topic": other}],
            "transaction": {"producer_group": "pg"},
        },
    ).json()
    end(client, rolled["transaction_id"], "rollback")
    assert bodies(client, topic) == ["a1", "a2"] and bodies(client, other) == ["b1"]


def test_producer_groups(client: httpx.Client) -> None:
    created = client.put("/producer-groups/pg_reg", json={"check_url": "http://127.0.0.1:9/check"})
    assert created.status_code == 201 and created.json()["check_url"] == "http://127.0.0.1:9/check"
    assert (
        client.put("/producer-groups/pg_reg", json={"check_url": "http://127.0.0.1:9/c2"}).status_code == 200
    )
    assert client.get("/producer-groups/pg_reg").json()["check_url"] == "http://127.0.0.1:9/c2"
    assert "pg_reg" in {g["producer_group"] for g in client.get("/producer-groups").json()}
    bad = client.put("/producer-groups/pg_reg", json={"check_url": "ftp://x"})
    assert bad.status_code == 400
    assert client.delete("/producer-groups/pg_reg").status_code == 204
    assert client.get("/producer-groups/pg_reg").status_code == 404


@pytest.mark.parametrize("action", ["commit", "rollback"])
def test_pending_transactions_survive_a_restart(broker_factory: BrokerFactory, action: str) -> None:
    first = broker_factory()
    with first.client() as http:
        pending = half(http, "orders", "later")
        done = half(http, "orders", "done")
        end(http, done["transaction_id"], "commit")
    first.stop()
    second = broker_factory(store_dir=first.store_dir)
    with second.client() as http:
        listed = http.get("/transactions", params={"producer_group": "pg"}).json()["transactions"]
        assert [t["transaction_id"] for t in listed] == [pending["transaction_id"]]
        assert http.get(f"/transactions/{done['transaction_id']}").json()["state"] == "committed"
        assert end(http, pending["transaction_id"], action).json()["ended_now"] is True
        assert bodies(http, "orders") == (["done", "later"] if action == "commit" else ["done"])
        assert end(http, done["transaction_id"], "commit").json()["ended_now"] is False


def test_one_request_commit_stores_half_final_and_op(client: httpx.Client, topic: str) -> None:
    """``"commit": true``: the transaction ends in the request that stores its halves."""
    one = client.post(
        f"/topics/{topic}/messages",
        json={"body": "now", "transaction": {"producer_group": "pg", "commit": True}},
    )
    assert one.status_code == 201, one.text
    answer = one.json()
    assert answer["topic"] == topic, "the answer names the committed message, not the half"
    assert bodies(client, topic) == ["now"]
    state = client.get(f"/transactions/{answer['transaction_id']}").json()
    assert state["state"] == "committed" and state["messages"] == 1
    batch = client.post(
        f"/topics/{topic}/messages:batch",
        json={
            "messages": [{"body": "b1"}, {"body": "b2"}],
            "transaction": {"producer_group": "pg", "commit": True},
        },
    )
    assert batch.status_code == 201, batch.text
    assert {r["topic"] for r in batch.json()["results"]} == {topic}
    assert bodies(client, topic) == ["b1", "b2", "now"]
    again = end(client, answer["transaction_id"], "rollback")
    assert again.status_code == 200 and again.json()["state"] == "committed" and not again.json()["ended_now"]
