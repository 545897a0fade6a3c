"""Delay levels and timer messages through the HTTP door (JSON, batch, NDJSON, Arrow): where the
message is parked, its properties, and every refusal as a 400 naming the field, nothing stored."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pyarrow as pa
import pytest

from .test_batches import arrow_bytes

ARROW = "application/vnd.apache.arrow.stream"
DAY_MS = 86_400_000


def stored(client: httpx.Client, result: dict[str, Any]) -> dict[str, Any]:
    got = client.get(f"/messages/{result['msg_id']}")
    assert got.status_code == 200, got.text
    return dict(got.json())


def refused(response: httpx.Response, field: str) -> str:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "invalid_schedule" and body["field"] == field, body
    assert field in body["message"]
    return str(body["message"])


def count(client: httpx.Client, topic: str) -> int:
    described = client.get(f"/topics/{topic}")
    if described.status_code == 404:
        return 0
    return sum(q["max_offset"] for q in described.json()["queue_offsets"])


def test_delay_level_zero_is_a_plain_message_and_above_the_table_clamps(
    client: httpx.Client, topic: str
) -> None:
    client.put(f"/topics/{topic}", json={"queues": 1})
    plain = client.post(f"/topics/{topic}/messages", json={"body": "now", "delay_level": 0}).json()
    assert (plain["topic"], plain["queue_offset"]) == (topic, 0)
    clamped = client.post(f"/topics/{topic}/messages", json={"body": "later", "delay_level": 19}).json()
    assert (clamped["topic"], clamped["queue_id"]) == ("SCHEDULE_TOPIC_XXXX", 17)
    assert stored(client, clamped)["properties"]["DELAY"] == "18"


def test_negative_level_is_refused(client: httpx.Client, topic: str) -> None:
    refused(client.post(f"/topics/{topic}/messages", json={"body": "x", "delay_level": -1}), "delay_level")
    assert count(client, topic) == 0


def test_delay_ms_parks_a_timer_message_as_rocketmq_5(client: httpx.Client, topic: str) -> None:
    client.put(f"/topics/{topic}", json={"queues": 2})
    before = int(time.time() * 1000)
    result = client.post(
        f"/topics/{topic}/messages", json={"body": "t", "delay_ms": 60_000, "queue_id": 1}
    ).json()
    after = int(time.time() * 1000)
    assert (result["topic"], result["queue_id"]) == ("rmq_sys_wheel_timer", 0)
    props = stored(client, result)["properties"]
    assert props["TIMER_DELAY_MS"] == "60000"
    assert props["REAL_TOPIC"] == topic and props["REAL_QID"] == "1"
    out = int(props["TIMER_OUT_MS"])
    assert out % 1000 == 0 and before + 60_000 - 1000 <= out < after + 60_000
    assert count(client, topic) == 0, "never visible before its due time"


def test_deliver_at_ms_rounds_an_exact_second_one_slot_lower(client: httpx.Client, topic: str) -> None:
    due = (int(time.time() * 1000) // 1000 + 120) * 1000  # an exact multiple of the precision
    result = client.post(f"/topics/{topic}/messages", json={"body": "t", "deliver_at_ms": due}).json()
    props = stored(client, result)["properties"]
    assert props["TIMER_DELIVER_MS"] == str(due)
    assert int(props["TIMER_OUT_MS"]) == due - 1000  # delivered at TIMER_OUT_MS + 1 s = due


def test_a_past_deliver_at_ms_is_stored_at_once(client: httpx.Client, topic: str) -> None:
    result = client.post(f"/topics/{topic}/messages", json={"body": "late", "deliver_at_ms": 1_000}).json()
    assert result["topic"] == topic
    assert stored(client, result)["properties"]["TIMER_DELIVER_MS"] == "1000"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"delay_level": 1, "delay_ms": 5}, "delay_ms"),
        ({"delay_level": 0, "deliver_at_ms": 5}, "deliver_at_ms"),
        ({"deliver_at_ms": 5, "delay_ms": 5}, "delay_ms"),
        ({"delay_ms": -1}, "delay_ms"),
        ({"deliver_at_ms": -5}, "deliver_at_ms"),
        ({"delay_ms": 3 * DAY_MS + 1}, "delay_ms"),
    ],
)
def test_refusals_name_the_field(
    client: httpx.Client, topic: str, fields: dict[str, int], field: str
) -> None:
    refused(client.post(f"/topics/{topic}/messages", json={"body": "x", **fields}), field)
    assert count(client, topic) == 0


def test_beyond_the_max_delay_is_refused(client: httpx.Client, topic: str) -> None:
    far = int(time.time() * 1000) + 4 * DAY_MS
    message = refused(
        client.post(f"/topics/{topic}/messages", json={"body": "x", "deliver_at_ms": far}), "deliver_at_ms"
    )
    assert "--timer-max-delay" in message


def test_batch_refusal_names_the_entry_and_stores_nothing(client: httpx.Client, topic: str) -> None:
    entries = [{"body": "a"}, {"body": "b", "delay_ms": 1000}, {"body": "c", "delay_level": 2, "delay_ms": 1}]
    response = client.post(f"/topics/{topic}/messages:batch", json={"messages": entries})
    assert refused(response, "delay_ms").startswith("messages[2]")
    assert response.json()["index"] == 2
    assert count(client, topic) == 0


def test_batch_and_ndjson_mix_plain_level_and_timer_entries(client: httpx.Client, topic: str) -> None:
    client.put(f"/topics/{topic}", json={"queues": 1})
    entries = [{"body": "a"}, {"body": "b", "delay_ms": 30_000}, {"body": "c", "delay_level": 1}]
    results = client.post(f"/topics/{topic}/messages:batch", json={"messages": entries}).json()["results"]
    assert [r["topic"] for r in results] == [topic, "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"]
    ndjson = "\n".join(json.dumps(e) for e in entries)
    again = client.post(
        f"/topics/{topic}/messages:batch", content=ndjson, headers={"Content-Type": "application/x-ndjson"}
    ).json()["results"]
    assert [r["topic"] for r in again] == [topic, "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"]


def test_arrow_batch_takes_the_timer_columns(client: httpx.Client, topic: str) -> None:
    due = int(time.time() * 1000) + 90_000
    table = pa.table(
        {
            "body": pa.array([b"a", b"b", b"c"]),
            "delay_level": pa.array([None, 0, None], pa.int32()),
            "deliver_at_ms": pa.array([due, None, None], pa.int64()),
            "delay_ms": pa.array([None, None, 45_000], pa.int64()),
        }
    )
    response = client.post(
        f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers={"Content-Type": ARROW}
    )
    assert response.status_code == 201, response.text
    results = response.json()["results"]
    assert [r["topic"] for r in results] == ["rmq_sys_wheel_timer", topic, "rmq_sys_wheel_timer"]
    assert stored(client, results[0])["properties"]["TIMER_DELIVER_MS"] == str(due)
    bad = pa.table({"body": pa.array([b"a", b"b"]), "delay_level": pa.array([1, -3], pa.int32())})
    response = client.post(
        f"/topics/{topic}/messages:batch", content=arrow_bytes(bad), headers={"Content-Type": ARROW}
    )
    assert refused(response, "delay_level").startswith("messages[1]")
