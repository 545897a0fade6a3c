"""Bearer-token auth: off by default; when on, every endpoint but /healthz is guarded."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from .conftest import BrokerFactory, RunningBroker
from .test_api_topics_produce import error_of

TOKENS = {
    "tokens": [
        {"name": "admin", "token": "admin-token", "admin": ["*"], "produce": ["*"], "consume": ["*"]},
        {"name": "writer", "token": "writer-token", "produce": ["orders*"]},
        {"name": "reader", "token": "reader-token", "consume": ["orders"]},
    ]
}


@pytest.fixture
def secured(broker_factory: BrokerFactory, tmp_path: Path) -> RunningBroker:
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps(TOKENS))
    broker = broker_factory(auth_file=auth_file)
    admin = broker.client("admin-token")
    assert admin.put("/topics/orders", json={"queues": 1}).status_code == 201
    assert admin.put("/topics/payments", json={"queues": 1}).status_code == 201
    return broker


#: Every guarded endpoint, with a request that would succeed for the admin token.
GUARDED = [
    ("get", "/topics", {}),
    ("put", "/topics/orders", {"json": {"queues": 1}}),
    ("get", "/topics/orders", {}),
    ("post", "/topics/orders/messages", {"json": {"body": "x"}}),
    ("post", "/topics/orders/messages:batch", {"json": {"messages": [{"body": "x"}]}}),
    ("get", "/topics/orders/queues/0/messages", {}),
    ("get", "/topics/orders/queues/0/offset", {"params": {"timestamp_ms": 0}}),
    ("get", "/topics/orders/messages", {"params": {"key": "k"}}),
    ("get", "/groups", {}),
    ("get", "/groups/g/offsets", {"params": {"topic": "orders"}}),
    ("put", "/groups/g/offsets", {"json": {"topic": "orders", "offsets": {"0": 0}}}),
    ("post", "/groups/g/reset", {"json": {"topic": "orders", "to": "earliest"}}),
    ("get", "/groups/g/lag", {"params": {"topic": "orders"}}),
    ("get", "/metrics", {}),
    ("get", "/openapi.json", {}),
    ("get", "/docs", {}),
    ("get", "/sinks/spark_sink", {}),
    ("delete", "/topics/payments", {}),
]


def test_every_endpoint_but_healthz_is_guarded(secured: RunningBroker) -> None:
    anonymous, wrong = secured.client(), secured.client("not-a-token")
    assert anonymous.get("/healthz").status_code == 200
    for method, path, kwargs in GUARDED:
        response = anonymous.request(method, path, **kwargs)
        assert (response.status_code, error_of(response)) == (401, "unauthorized"), (method, path)
        assert response.headers["www-authenticate"] == "Bearer"
        assert wrong.request(method, path, **kwargs).status_code == 401, (method, path)
    admin = secured.client("admin-token")
    for method, path, kwargs in GUARDED:
        response = admin.request(method, path, **kwargs)
        assert response.status_code < 300, (method, path, response.text)


def test_every_route_in_the_spec_needs_a_token(secured: RunningBroker) -> None:
    spec = secured.client("admin-token").get("/openapi.json").json()
    anonymous = secured.client()
    checked = 0
    for template, operations in spec["paths"].items():
        path = re.sub(r"\{[^}]+\}", "0", template)
        for method in operations:
            response = anonymous.request(method, path)
            expected = 200 if template == "/healthz" else 401
            assert response.status_code == expected, (method, template, response.text)
            checked += 1
    assert checked >= 19


def test_rights_per_topic(secured: RunningBroker) -> None:
    writer, reader = secured.client("writer-token"), secured.client("reader-token")
    produced = writer.post("/topics/orders/messages", json={"body": "x"})
    assert produced.status_code == 201
    forbidden = writer.post("/topics/payments/messages", json={"body": "x"})
    assert (forbidden.status_code, error_of(forbidden)) == (403, "forbidden")
    assert writer.get("/topics/orders/queues/0/messages").status_code == 403
    assert writer.put("/topics/orders", json={"queues": 2}).status_code == 403
    assert writer.get("/metrics").status_code == 403
    assert reader.get("/topics/orders/queues/0/messages").json()["messages"][0]["body"] == "x"
    assert reader.post("/topics/orders/messages", json={"body": "x"}).status_code == 403
    assert reader.get("/topics/payments/queues/0/messages").status_code == 403
    assert reader.get(f"/messages/{produced.json()['msg_id']}").status_code == 200
    assert [t["topic"] for t in reader.get("/topics").json()["topics"]] == ["orders"]
    assert reader.put("/groups/r/offsets", json={"topic": "orders", "offsets": {"0": 1}}).status_code == 200
    assert reader.get("/groups/r/lag", params={"topic": "payments"}).status_code == 403


def test_auth_off_by_default(broker_factory: BrokerFactory) -> None:
    client = broker_factory().client()
    assert client.get("/metrics").status_code == 200
    assert client.post("/topics/open/messages", json={"body": "x"}).status_code == 201
