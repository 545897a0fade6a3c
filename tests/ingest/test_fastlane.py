"""The single-produce fast lane answers exactly as the FastAPI route does.

Each test runs the same requests against a broker with the fast lane and one without
(``ServerConfig.fast_lane=False``), on fresh stores, and compares status, headers and body
(store-assigned ``uniq_key`` and ``store_timestamp`` aside). A counter on the lane's call of
``produce_one_json`` proves which path answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.state import Broker
from ingest_api.http import fastlane
from ingest_api.http.schemas import ProduceIn

from .conftest import BrokerFactory, RunningBroker

JSON = {"content-type": "application/json"}
#: Fields that differ between two stores given the same requests.
_VOLATILE = ("uniq_key", "store_timestamp")


@pytest.fixture
def lane_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Topics produced through the fast lane (the route calls ``local_produce.produce_one_json`` itself)."""
    calls: list[str] = []
    original = fastlane.produce_one_json

    async def counted(broker: Broker, topic: str, entry: ProduceIn) -> Any:
        calls.append(topic)
        return await original(broker, topic, entry)

    monkeypatch.setattr(fastlane, "produce_one_json", counted)
    return calls


@pytest.fixture
def pair(broker_factory: BrokerFactory) -> tuple[httpx.Client, httpx.Client]:
    """(fast lane on, fast lane off) clients, each on a fresh store."""
    fast = broker_factory(fast_lane=True)
    plain = broker_factory(fast_lane=False)
    return fast.client(), plain.client()


def _comparable(response: httpx.Response) -> tuple[int, dict[str, str], Any]:
    headers = {k: v for k, v in response.headers.items() if k not in ("date", "location")}
    try:
        body: Any = response.json()
    except ValueError:
        body = response.content
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in _VOLATILE}
    return response.status_code, headers, body


def _same(pair: tuple[httpx.Client, httpx.Client], method: str, url: str, **kwargs: Any) -> httpx.Response:
    fast, plain = pair
    got = fast.request(method, url, **kwargs)
    expected = plain.request(method, url, **kwargs)
    assert _comparable(got) == _comparable(expected)
    if got.status_code >= 400:  # error bodies are byte-identical
        assert got.content == expected.content
    return got


VALID = [
    {"body": "hello"},
    {"body_base64": "AAEC/w=="},
    {"body": "x" * 100, "tags": "TagA", "keys": ["k1", "k2"], "properties": {"a": "1"}},
    {"body": "q", "queue_id": 1},
    {"body": "s", "sharding_key": "order-7"},
    {"body": "d", "delay_level": 3},
    {"body": "\u00e9\u4e2d\U0001f600"},
]


def test_valid_produces_are_identical_and_take_the_lane(
    pair: tuple[httpx.Client, httpx.Client], lane_calls: list[str]
) -> None:
    for client in pair:
        assert client.put("/topics/lane", json={"queues": 2}).status_code == 201
    for entry in VALID:
        response = _same(pair, "POST", "/topics/lane/messages", content=json.dumps(entry), headers=JSON)
        assert response.status_code == 201, response.text
    # auto-created topic
    assert (
        _same(pair, "POST", "/topics/fresh/messages", content=b'{"body":"a"}', headers=JSON).status_code
        == 201
    )
    assert lane_calls == ["lane"] * len(VALID) + ["fresh"]
    # what was stored is the same too
    for queue_id in (0, 1):
        pulled = [
            client.get(f"/topics/lane/queues/{queue_id}/messages", params={"max_messages": 100}).json()
            for client in pair
        ]
        stored = [
            [{k: v for k, v in m.items() if k not in (*_VOLATILE, "born_timestamp")} for m in p["messages"]]
            for p in pulled
        ]
        assert stored[0] == stored[1] and stored[0]


INVALID: list[tuple[str, bytes, dict[str, str]]] = [
    ("/topics/lane/messages", b"{not json", JSON),
    ("/topics/lane/messages", b"", JSON),
    ("/topics/lane/messages", b'{"body": "a", "body_base64": "AA=="}', JSON),
    ("/topics/lane/messages", b'{"body": "a", "extra": 1}', JSON),
    ("/topics/lane/messages", b'{"body": "\\ud800"}', JSON),
    ("/topics/lane/messages", b'{"body": "a", "queue_id": 99}', JSON),  # unknown queue (409)
    ("/topics/lane/messages", b'{"body": "a", "tags": "a||b"}', JSON),
    ("/topics/lane/messages", b"[]", JSON),
    ("/topics/lane/messages", b'{"body": "a"}', {"content-type": "text/plain"}),
    ("/topics/lane/messages", b'{"body": "a"}', {}),
    ("/topics/bad%20name/messages", b'{"body": "a"}', JSON),
    ("/topics/" + "t" * 256 + "/messages", b'{"body": "a"}', JSON),
    ("/topics/RMQ_SYS_TRANS_HALF_TOPIC/messages", b'{"body": "a"}', JSON),
    ("/topics/lane/messages/", b'{"body": "a"}', JSON),
]


def test_invalid_requests_get_the_routes_answers(
    pair: tuple[httpx.Client, httpx.Client], lane_calls: list[str]
) -> None:
    for client in pair:
        assert client.put("/topics/lane", json={"queues": 2}).status_code == 201
    for path, content, headers in INVALID:
        response = _same(pair, "POST", path, content=content, headers=headers)
        assert response.status_code != 201 or content == b'{"body": "a"}', (path, content, response.text)
    # Only these two reached produce_one (the store refuses them there, rendered by the app's
    # error mapping); every other request was handed to the route.
    assert lane_calls == ["lane", "RMQ_SYS_TRANS_HALF_TOPIC"]


def test_errors_raised_while_producing(broker_factory: BrokerFactory, lane_calls: list[str]) -> None:
    """Unknown topic without auto-creation and an oversized body: raised inside produce_one,
    rendered by the app's error mapping."""
    store = {"auto_create_topics": False, "max_message_size_bytes": 1024}
    fast = broker_factory(store=store, fast_lane=True).client()
    plain = broker_factory(store=store, fast_lane=False).client()
    for path, content in [
        ("/topics/missing/messages", b'{"body": "a"}'),
        ("/topics/missing/messages", json.dumps({"body": "x" * 2000}).encode()),
    ]:
        got = fast.post(path, content=content, headers=JSON)
        expected = plain.post(path, content=content, headers=JSON)
        assert got.status_code == expected.status_code == 404
        assert (
            got.content == expected.content
            and got.headers["content-type"] == expected.headers["content-type"]
        )
    for client in (fast, plain):
        assert client.put("/topics/small", json={"queues": 1}).status_code == 201
    content = json.dumps({"body": "x" * 2000}).encode()
    got, expected = (c.post("/topics/small/messages", content=content, headers=JSON) for c in (fast, plain))
    assert got.status_code == expected.status_code == 413
    assert got.content == expected.content
    assert lane_calls == ["missing", "missing", "small"]


def test_chunked_body_takes_the_lane(broker_factory: BrokerFactory, lane_calls: list[str]) -> None:
    client = broker_factory().client()

    def chunks() -> Iterator[bytes]:
        yield b'{"body": '
        yield b'"chunked"}'

    response = client.post("/topics/chunky/messages", content=chunks(), headers=JSON)
    assert response.status_code == 201, response.text
    assert lane_calls == ["chunky"]
    pulled = client.get(f"/topics/chunky/queues/{response.json()['queue_id']}/messages").json()
    assert [m["body"] for m in pulled["messages"]] == ["chunked"]


TOKENS = {
    "tokens": [
        {"name": "admin", "token": "admin-token", "admin": ["*"], "produce": ["*"], "consume": ["*"]},
        {"name": "writer", "token": "writer-token", "produce": ["orders*"]},
    ]
}


def test_auth_is_enforced_on_the_lane(
    broker_factory: BrokerFactory, tmp_path: Path, lane_calls: list[str]
) -> None:
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps(TOKENS))
    brokers: list[RunningBroker] = [
        broker_factory(auth_file=auth_file, fast_lane=True),
        broker_factory(auth_file=auth_file, fast_lane=False),
    ]
    answers: list[list[tuple[int, bytes, str | None]]] = []
    for broker in brokers:
        assert broker.client("admin-token").put("/topics/orders", json={"queues": 1}).status_code == 201
        seen = []
        for token, topic in [
            (None, "orders"),
            ("wrong-token", "orders"),
            ("writer-token", "payments"),  # 403: no right on this topic
        ]:
            response = broker.client(token).post(
                f"/topics/{topic}/messages", content=b'{"body":"a"}', headers=JSON
            )
            seen.append((response.status_code, response.content, response.headers.get("www-authenticate")))
        scheme = broker.client().post(
            "/topics/orders/messages",
            content=b'{"body":"a"}',
            headers={**JSON, "Authorization": "Basic eDp5"},
        )
        seen.append((scheme.status_code, scheme.content, scheme.headers.get("www-authenticate")))
        answers.append(seen)
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[0]] == [401, 401, 403, 401]
    assert lane_calls == []  # every refusal came from the route
    ok = (
        brokers[0]
        .client("writer-token")
        .post("/topics/orders/messages", content=b'{"body":"a"}', headers=JSON)
    )
    assert ok.status_code == 201
    assert lane_calls == ["orders"]


def test_metrics_count_lane_produces(broker_factory: BrokerFactory, lane_calls: list[str]) -> None:
    client = broker_factory().client()
    for _ in range(3):
        assert (
            client.post("/topics/counted/messages", content=b'{"body":"abcd"}', headers=JSON).status_code
            == 201
        )
    assert lane_calls == ["counted"] * 3
    lines = client.get("/metrics").text.splitlines()
    assert 'sparkmq_messages_in_total{door="http",topic="counted"} 3' in lines
    assert 'sparkmq_bytes_in_total{door="http",topic="counted"} 12' in lines
    assert 'sparkmq_produce_latency_seconds_count{kind="single"} 3' in lines


def test_openapi_still_documents_the_route(broker_factory: BrokerFactory) -> None:
    spec = broker_factory().client().get("/openapi.json").json()
    post = spec["paths"]["/topics/{topic}/messages"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ProduceIn"
    }


def test_size_limit_applies_to_the_lane(broker_factory: BrokerFactory, lane_calls: list[str]) -> None:
    """The lane sits in front of the size-limit middleware: a larger body (declared or chunked)
    is handed to the app, which refuses it as it always did."""
    fast = broker_factory(fast_lane=True, max_request_bytes=1024).client()
    plain = broker_factory(fast_lane=False, max_request_bytes=1024).client()
    big = json.dumps({"body": "x" * 2000}).encode()

    def chunks() -> Iterator[bytes]:
        yield big[:1000]
        yield big[1000:]

    for content in (big, chunks):
        got, expected = (
            c.post(
                "/topics/sized/messages", content=content() if callable(content) else content, headers=JSON
            )
            for c in (fast, plain)
        )
        assert got.status_code == expected.status_code == 413
        assert got.content == expected.content
    assert lane_calls == []
    assert fast.post("/topics/sized/messages", content=b'{"body":"a"}', headers=JSON).status_code == 201
    assert lane_calls == ["sized"]


def test_lane_answers_are_timed(broker_factory: BrokerFactory, lane_calls: list[str]) -> None:
    client = broker_factory().client()
    for _ in range(2):
        assert client.post("/topics/timed/messages", content=b'{"body":"a"}', headers=JSON).status_code == 201
    assert (
        client.post("/topics/timed/messages", content=b'{"body":"a","queue_id":99}', headers=JSON).status_code
        == 409
    )
    lines = client.get("/metrics").text.splitlines()
    route = 'method="POST",route="/topics/{topic}/messages"'
    assert f'sparkmq_http_request_duration_seconds_count{{{route},status="2xx"}} 2' in lines
    assert f'sparkmq_http_request_duration_seconds_count{{{route},status="4xx"}} 1' in lines
    assert lane_calls == ["timed"] * 3


def test_a_bug_on_the_lane_is_a_bare_500(
    broker_factory: BrokerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Starlette's ServerErrorMiddleware answers for the route; the error is re-raised."""

    async def broken(*args: Any) -> bytes:
        raise RuntimeError("bug")

    monkeypatch.setattr(fastlane, "produce_one_json", broken)
    broker = broker_factory()
    response = broker.client().post("/topics/buggy/messages", content=b'{"body":"a"}', headers=JSON)
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    assert response.headers["content-type"].startswith("text/plain")
    lines = broker.client().get("/metrics").text.splitlines()  # uvicorn closed that connection
    assert (
        'sparkmq_http_request_duration_seconds_count{method="POST",route="/topics/{topic}/messages",'
        'status="5xx"} 1' in lines
    )


def test_transaction_ends_take_the_lane_and_answer_as_the_route(
    pair: tuple[httpx.Client, httpx.Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    ended: list[str] = []
    original = fastlane.end_transaction_json

    async def counted(broker: Broker, principal: Any, transaction_id: str, body: Any, headers: Any) -> Any:
        ended.append(transaction_id)
        return await original(broker, principal, transaction_id, body, headers)

    monkeypatch.setattr(fastlane, "end_transaction_json", counted)
    txids = []
    for client in pair:
        half = client.post("/topics/tx/messages", json={"body": "a", "transaction": {"producer_group": "pg"}})
        assert half.status_code == 201, half.text
        txids.append(half.json()["transaction_id"])
    answers = [
        client.post(
            f"/transactions/{txid}", content=b'{"action": "commit", "producer_group": "pg"}', headers=JSON
        )
        for client, txid in zip(pair, txids, strict=True)
    ]
    assert [a.status_code for a in answers] == [200, 200]
    volatile = ("transaction_id", "born_timestamp", "age_ms", "results")
    fast, plain = ({k: v for k, v in a.json().items() if k not in volatile} for a in answers)
    assert fast == plain and fast["state"] == "committed" and fast["ended_now"]
    assert ended == [txids[0]], "only the fast broker's end took the lane"
    for path, body in (
        (f"/transactions/{txids[0]}", b'{"action": "commit"}'),  # no producer group: the route's 422
        ("/transactions/unknown-id", b'{"action": "commit", "producer_group": "pg"}'),  # 404
        (f"/transactions/{txids[0]}/x", b'{"action": "commit", "producer_group": "pg"}'),
    ):
        got = pair[0].post(path, content=body, headers=JSON)
        expected = pair[1].post(path.replace(txids[0], txids[1]), content=body, headers=JSON)
        assert got.status_code == expected.status_code and got.status_code >= 400
