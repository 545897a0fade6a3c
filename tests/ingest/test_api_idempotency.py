"""Idempotency-Key: a retried produce returns the original result, across broker restarts too."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
from pyarrow import ipc

from .conftest import BrokerFactory

ARROW = "application/vnd.apache.arrow.stream"


def _arrow_body(bodies: list[bytes]) -> bytes:
    sink = io.BytesIO()
    batch = pa.record_batch([pa.array(bodies, pa.binary())], names=["body"])
    with ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def _total(client: object, topic: str) -> int:
    queues = client.get(f"/topics/{topic}").json()["queue_offsets"]  # type: ignore[attr-defined]
    return sum(q["max_offset"] for q in queues)


def test_retried_requests_write_once_across_a_restart(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    store_dir = tmp_path / "idempotent-store"
    broker = broker_factory(store_dir=store_dir)
    http = broker.client()
    assert http.put("/topics/orders", json={"queues": 3}).status_code == 201
    one = {"body": "order 42 paid", "keys": ["order-42"]}
    many = {"messages": [{"body": f"line {i}"} for i in range(5)]}
    first_one = http.post("/topics/orders/messages", json=one, headers={"Idempotency-Key": "req-1"})
    first_many = http.post("/topics/orders/messages:batch", json=many, headers={"Idempotency-Key": "req-2"})
    first_arrow = http.post(
        "/topics/orders/messages:batch",
        content=_arrow_body([b"a", b"b"]),
        headers={"Idempotency-Key": "req-3", "Content-Type": ARROW},
    )
    assert (first_one.status_code, first_many.status_code, first_arrow.status_code) == (201, 201, 201)
    assert _total(http, "orders") == 8

    again = http.post("/topics/orders/messages", json=one, headers={"Idempotency-Key": "req-1"})
    assert again.json() == first_one.json()
    assert _total(http, "orders") == 8

    broker.stop()
    broker = broker_factory(store_dir=store_dir)
    http = broker.client()
    assert http.post("/topics/orders/messages", json=one, headers={"Idempotency-Key": "req-1"}).json() == (
        first_one.json()
    )
    retried = http.post("/topics/orders/messages:batch", json=many, headers={"Idempotency-Key": "req-2"})
    assert retried.json() == first_many.json()
    retried_arrow = http.post(
        "/topics/orders/messages:batch",
        content=_arrow_body([b"a", b"b"]),
        headers={"Idempotency-Key": "req-3", "Content-Type": ARROW},
    )
    assert retried_arrow.json() == first_arrow.json()
    assert _total(http, "orders") == 8

    fresh = http.post("/topics/orders/messages", json=one, headers={"Idempotency-Key": "req-4"})
    assert fresh.status_code == 201
    assert fresh.json()["msg_id"] != first_one.json()["msg_id"]
    assert http.post("/topics/orders/messages", json=one).status_code == 201  # no key: stored again
    assert _total(http, "orders") == 10


def test_bad_idempotency_keys_are_refused(broker_factory: BrokerFactory) -> None:
    http = broker_factory().client()
    for bad in ("", "x" * 201, "has space", "tab\there"):
        response = http.post("/topics/t/messages", json={"body": "x"}, headers={"Idempotency-Key": bad})
        assert response.status_code == 400, (bad, response.text)
        assert response.json()["error"] == "invalid_idempotency_key"
    assert http.get("/topics").json()["topics"] == []  # nothing was stored, not even the topic


def test_the_header_is_documented(broker_factory: BrokerFactory) -> None:
    spec = broker_factory().client().get("/openapi.json").json()
    for path in ("/topics/{topic}/messages", "/topics/{topic}/messages:batch"):
        names = [p["name"] for p in spec["paths"][path]["post"]["parameters"]]
        assert "Idempotency-Key" in names
