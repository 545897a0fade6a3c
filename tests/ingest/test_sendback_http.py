"""Send-backs over HTTP against a real broker (no Spark): one message or a list in one request,
stored together as rmq_sys_sendback requests; idempotent with a key; a refusal names the item."""

from __future__ import annotations

import httpx

from store import SENDBACK_TOPIC


def produced(client: httpx.Client, topic: str, count: int) -> list[dict[str, object]]:
    client.put("/groups/billing", json={}).raise_for_status()
    out = []
    for i in range(count):
        response = client.post(f"/topics/{topic}/messages", json={"body": f"m{i}", "queue_id": 0})
        assert response.status_code == 201, response.text
        out.append(response.json())
    return out


def requests_stored(client: httpx.Client) -> int:
    described = client.get(f"/topics/{SENDBACK_TOPIC}")
    return int(described.json()["queue_offsets"][0]["max_offset"]) if described.status_code == 200 else 0


def test_a_list_is_sent_back_in_one_request_and_answered_item_by_item(
    client: httpx.Client, topic: str
) -> None:
    messages = produced(client, topic, 3)
    before = requests_stored(client)
    items = [
        {"topic": topic, "msg_id": messages[0]["msg_id"]},
        {"topic": topic, "msg_id": messages[1]["uniq_key"], "delay_level": -1},  # by UNIQ_KEY, to the DLQ
        {"topic": topic, "msg_id": messages[2]["msg_id"], "delay_level": 5},
    ]
    response = client.post(
        "/groups/billing/messages:sendBack", json=items, headers={"Idempotency-Key": "b-1"}
    )
    assert response.status_code == 200, response.text
    answers = response.json()
    assert [a["outcome"] for a in answers] == ["retry", "dlq", "retry"]
    assert [a["delay_level"] for a in answers] == [3, 0, 5]
    assert [a["uniq_key"] for a in answers] == [m["uniq_key"] for m in messages]
    assert [a["msg_id"] for a in answers] == [m["msg_id"] for m in messages]
    assert requests_stored(client) == before + 3
    again = client.post("/groups/billing/messages:sendBack", json=items, headers={"Idempotency-Key": "b-1"})
    assert [a["request_id"] for a in again.json()] == [a["request_id"] for a in answers]
    assert requests_stored(client) == before + 3, "a retried request stores nothing new"
    single = client.post("/groups/billing/messages:sendBack", json=items[0])
    assert single.status_code == 200 and single.json()["attempt"] == 0  # one object: one answer


def test_a_refused_item_names_its_index_and_nothing_is_stored(client: httpx.Client, topic: str) -> None:
    messages = produced(client, topic, 1)
    before = requests_stored(client)
    items = [{"topic": topic, "msg_id": messages[0]["msg_id"]}, {"topic": topic, "msg_id": "no-such-key"}]
    response = client.post("/groups/billing/messages:sendBack", json=items)
    assert response.status_code == 404 and "messages[1]" in response.json()["message"]
    bad = client.post("/groups/billing/messages:sendBack", json=[items[0], {**items[0], "delay_level": -2}])
    assert bad.status_code == 400 and "messages[1]" in bad.json()["message"]
    assert client.post("/groups/billing/messages:sendBack", json=[]).status_code == 422
    assert requests_stored(client) == before


def test_a_long_list_takes_the_columnar_path_and_answers_the_same(client: httpx.Client, topic: str) -> None:
    """More than a few items are read and built column by column: same answers, same records."""
    messages = produced(client, topic, 12)
    before = requests_stored(client)
    items = [
        {"topic": topic, "msg_id": m["msg_id"] if i % 2 else m["uniq_key"]} for i, m in enumerate(messages)
    ]
    answers = client.post("/groups/billing/messages:sendBack", json=items).json()
    assert [a["uniq_key"] for a in answers] == [m["uniq_key"] for m in messages]
    assert [a["msg_id"] for a in answers] == [m["msg_id"] for m in messages]
    assert {a["outcome"] for a in answers} == {"retry"} and {a["attempt"] for a in answers} == {0}
    assert requests_stored(client) == before + 12


def test_the_answer_the_route_renders_has_the_documented_fields_in_order() -> None:
    # The route renders retries.SendBack with msgspec; its fields are SendBackOut's (the schema).
    from dataclasses import fields

    from broker.retries import SendBack
    from ingest_api.http.routers.retries import SendBackOut

    assert [f.name for f in fields(SendBack)] == list(SendBackOut.model_fields)
