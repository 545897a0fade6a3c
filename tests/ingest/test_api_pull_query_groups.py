"""Pull (JSON, Arrow, long-poll), query, offsets by time, consumer groups, health and metrics."""

from __future__ import annotations

import base64
import threading
import time

import httpx
import pyarrow as pa
import pytest

from store.format.arrow_schema import MESSAGE_SCHEMA

from .conftest import RunningBroker
from .test_api_topics_produce import ARROW, error_of


def produce(
    client: httpx.Client, topic: str, bodies: list[str], queue_id: int = 0, **fields: object
) -> list[dict]:
    messages = [{"body": body, "queue_id": queue_id, **fields} for body in bodies]
    response = client.post(f"/topics/{topic}/messages:batch", json={"messages": messages})
    assert response.status_code == 201, response.text
    return list(response.json()["results"])


class TestPull:
    def test_json_pull_pages_with_next_offset(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        produce(client, topic, [f"m{i}" for i in range(10)])
        page = client.get(
            f"/topics/{topic}/queues/0/messages", params={"offset": 0, "max_messages": 4}
        ).json()
        assert (page["status"], page["next_offset"], page["min_offset"], page["max_offset"]) == (
            "FOUND",
            4,
            0,
            10,
        )
        assert [m["queue_offset"] for m in page["messages"]] == [0, 1, 2, 3]
        rest = client.get(
            f"/topics/{topic}/queues/0/messages", params={"offset": 4, "max_messages": 100}
        ).json()
        assert [m["body"] for m in rest["messages"]] == [f"m{i}" for i in range(4, 10)]
        end = client.get(f"/topics/{topic}/queues/0/messages", params={"offset": 10}).json()
        assert (end["status"], end["messages"], end["next_offset"]) == ("NO_NEW_MESSAGE", [], 10)

    def test_pulled_message_equals_lookup_by_id(self, client: httpx.Client, topic: str) -> None:
        # Pull renders from the Arrow batch read path, lookup from a decoded MessageView.
        client.put(f"/topics/{topic}", json={"queues": 1})
        sent = [
            {"body_base64": base64.b64encode(b"\xff\x00bin").decode(), "tags": "t", "keys": ["a", "b"]},
            {"body": "ünï", "properties": {"p": "1", "q": "2"}},
        ]
        for message in sent:
            assert (
                client.post(f"/topics/{topic}/messages", json={**message, "queue_id": 0}).status_code == 201
            )
        pulled = client.get(f"/topics/{topic}/queues/0/messages").json()["messages"]
        assert [client.get(f"/messages/{m['msg_id']}").json() for m in pulled] == pulled
        assert (pulled[0]["body"], pulled[0]["body_base64"]) == (None, sent[0]["body_base64"])
        assert (pulled[1]["body"], pulled[1]["properties"], pulled[1]["keys"]) == (
            "ünï",
            {"p": "1", "q": "2"},
            [],
        )

    def test_tag_filter(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        produce(client, topic, ["a1", "a2"], tags="A")
        produce(client, topic, ["b1"], tags="B")
        produce(client, topic, ["c1"], tags="C")
        page = client.get(f"/topics/{topic}/queues/0/messages", params={"tags": "A || C", "max_messages": 10})
        assert [m["body"] for m in page.json()["messages"]] == ["a1", "a2", "c1"]

    def test_arrow_pull(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        produce(client, topic, [f"r{i}" for i in range(50)], keys=["k"])
        response = client.get(
            f"/topics/{topic}/queues/0/messages",
            params={"offset": 10, "max_messages": 30},
            headers={"accept": ARROW},
        )
        assert response.status_code == 200
        assert response.headers["content-type"] == ARROW
        assert (response.headers["x-next-offset"], response.headers["x-max-offset"]) == ("40", "50")
        table = pa.ipc.open_stream(response.content).read_all()
        assert table.schema == MESSAGE_SCHEMA
        assert table.column("queue_offset").to_pylist() == list(range(10, 40))
        assert table.column("body").to_pylist()[0] == b"r10"
        assert table.column("keys").to_pylist()[0] == ["k"]
        empty = client.get(
            f"/topics/{topic}/queues/0/messages", params={"offset": 50}, headers={"accept": ARROW}
        )
        assert empty.headers["x-status"] == "NO_NEW_MESSAGE"
        assert pa.ipc.open_stream(empty.content).read_all().num_rows == 0

    def test_long_poll_wakes_on_arrival(
        self, client: httpx.Client, shared_broker: RunningBroker, topic: str
    ) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        result: dict[str, object] = {}

        def poll() -> None:
            with httpx.Client(base_url=shared_broker.url, timeout=30) as poller:
                started = time.monotonic()
                response = poller.get(
                    f"/topics/{topic}/queues/0/messages", params={"offset": 0, "wait_ms": 20_000}
                )
                result["elapsed"] = time.monotonic() - started
                result["body"] = response.json()

        thread = threading.Thread(target=poll)
        thread.start()
        # Another request on the same event loop must not be blocked by the waiting pull.
        assert client.get("/healthz").status_code == 200
        deadline = time.monotonic() + 10
        while "elapsed" not in result and time.monotonic() < deadline:
            produce(client, topic, ["wake up"])
            thread.join(timeout=0.2)
        thread.join(timeout=10)
        assert result["body"]["messages"][0]["body"] == "wake up"  # type: ignore[index]
        assert result["elapsed"] < 15  # type: ignore[operator]

    def test_long_poll_skips_filtered_arrivals(
        self, client: httpx.Client, shared_broker: RunningBroker, topic: str
    ) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        result: dict[str, httpx.Response] = {}

        def poll() -> None:
            with httpx.Client(base_url=shared_broker.url, timeout=30) as poller:
                result["response"] = poller.get(
                    f"/topics/{topic}/queues/0/messages",
                    params={"tags": "B", "wait_ms": 20_000},
                    headers={"accept": ARROW},
                )

        thread = threading.Thread(target=poll)
        thread.start()
        produce(client, topic, ["a1", "a2"], tags="A")  # arrive, but do not match
        thread.join(timeout=0.5)
        assert thread.is_alive(), "a filtered-out arrival must not end the long-poll"
        produce(client, topic, ["b1"], tags="B")
        thread.join(timeout=15)
        response = result["response"]
        assert pa.ipc.open_stream(response.content).read_all().column("body").to_pylist() == [b"b1"]
        assert response.headers["x-next-offset"] == "3"

    def test_long_poll_times_out(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        started = time.monotonic()
        page = client.get(f"/topics/{topic}/queues/0/messages", params={"wait_ms": 300}).json()
        elapsed = time.monotonic() - started
        assert page["messages"] == []
        assert 0.25 <= elapsed < 10

    def test_pull_errors(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        unknown_topic = client.get("/topics/no_such_topic_here/queues/0/messages")
        assert (unknown_topic.status_code, error_of(unknown_topic)) == (404, "unknown_topic")
        unknown_queue = client.get(f"/topics/{topic}/queues/7/messages")
        assert (unknown_queue.status_code, error_of(unknown_queue)) == (404, "unknown_queue")
        for params in ({"offset": -1}, {"max_messages": 0}, {"wait_ms": -5}, {"max_messages": 10**9}):
            response = client.get(f"/topics/{topic}/queues/0/messages", params=params)
            assert (response.status_code, error_of(response)) == (422, "validation_error"), params


class TestQuery:
    def test_by_key_and_by_ids(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        first = produce(client, topic, ["one"], keys=["order-1"])[0]
        produce(client, topic, ["two"], keys=["order-2"])
        third = produce(client, topic, ["three"], keys=["order-1"])[0]
        found = client.get(f"/topics/{topic}/messages", params={"key": "order-1"}).json()["messages"]
        assert sorted(m["body"] for m in found) == ["one", "three"]
        # The IndexFile keeps second-granular times, so windows here are a few seconds wide.
        stamp = third["store_timestamp"]
        around = {"key": "order-1", "begin_ms": stamp - 5000, "end_ms": stamp + 5000}
        assert len(client.get(f"/topics/{topic}/messages", params=around).json()["messages"]) == 2
        before = {"key": "order-1", "begin_ms": 0, "end_ms": first["store_timestamp"] - 5000}
        assert client.get(f"/topics/{topic}/messages", params=before).json() == {"messages": []}
        limited = {"key": "order-1", "max": 1}
        assert len(client.get(f"/topics/{topic}/messages", params=limited).json()["messages"]) == 1
        assert client.get(f"/topics/{topic}/messages", params={"key": "nope"}).json() == {"messages": []}
        by_offset_id = client.get(f"/messages/{first['msg_id']}").json()
        assert (by_offset_id["body"], by_offset_id["queue_offset"]) == ("one", 0)
        by_uniq = client.get(f"/messages/{third['uniq_key']}", params={"topic": topic}).json()
        assert by_uniq["body"] == "three"
        assert client.get(f"/messages/{third['uniq_key']}").json()["body"] == "three"
        missing = client.get("/messages/00000000000000000000000000000000")
        assert (missing.status_code, error_of(missing)) == (404, "message_not_found")

    def test_offset_for_timestamp(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        results = produce(client, topic, ["a", "b", "c"])
        stamp = results[0]["store_timestamp"]
        lower = client.get(f"/topics/{topic}/queues/0/offset", params={"timestamp_ms": 0}).json()
        assert lower["offset"] == 0
        after = client.get(f"/topics/{topic}/queues/0/offset", params={"timestamp_ms": stamp + 10**9}).json()
        assert after["offset"] == 3
        upper = client.get(
            f"/topics/{topic}/queues/0/offset", params={"timestamp_ms": stamp + 10**9, "boundary": "upper"}
        ).json()
        assert (upper["boundary"], upper["offset"]) == ("upper", 2)
        bad = client.get(f"/topics/{topic}/queues/0/offset", params={"timestamp_ms": 1, "boundary": "middle"})
        assert bad.status_code == 422
        assert client.get(f"/topics/{topic}/queues/9/offset", params={"timestamp_ms": 1}).status_code == 404


class TestGroups:
    def test_commit_read_lag_reset(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        produce(client, topic, ["a", "b", "c", "d"], queue_id=0)
        produce(client, topic, ["e"], queue_id=1)
        group = f"g_{topic}"[:100]
        fresh = client.get(f"/groups/{group}/offsets", params={"topic": topic}).json()
        assert fresh["offsets"] == {"0": -1, "1": -1}
        lag = client.get(f"/groups/{group}/lag", params={"topic": topic}).json()
        assert (lag["total_lag"], [q["lag"] for q in lag["queues"]]) == (5, [4, 1])
        committed = client.put(f"/groups/{group}/offsets", json={"topic": topic, "offsets": {"0": 3}})
        assert committed.status_code == 200, committed.text
        assert committed.json()["offsets"] == {"0": 3, "1": -1}
        lag = client.get(f"/groups/{group}/lag", params={"topic": topic}).json()
        assert lag["queues"][0] == {"queue_id": 0, "committed_offset": 3, "max_offset": 4, "lag": 1}
        assert lag["total_lag"] == 2
        latest = client.post(f"/groups/{group}/reset", json={"topic": topic, "to": "latest"}).json()
        assert latest["offsets"] == {"0": 4, "1": 1}
        earliest = client.post(f"/groups/{group}/reset", json={"topic": topic, "to": "earliest"}).json()
        assert earliest["offsets"] == {"0": 0, "1": 0}
        by_time = client.post(f"/groups/{group}/reset", json={"topic": topic, "timestamp_ms": 2**42}).json()
        assert by_time["offsets"] == {"0": 4, "1": 1}
        assert topic in client.get("/groups").json()["groups"][group]

    @pytest.mark.parametrize(
        ("method", "path", "kwargs", "status"),
        [
            ("put", "/groups/g/offsets", {"json": {"topic": "t", "offsets": {"0": -1}}}, 422),
            ("put", "/groups/g/offsets", {"json": {"topic": "t", "offsets": {}}}, 422),
            ("put", "/groups/g/offsets", {"json": {"topic": "no_such_topic_x", "offsets": {"0": 1}}}, 404),
            ("post", "/groups/g/reset", {"json": {"topic": "t"}}, 422),
            ("post", "/groups/g/reset", {"json": {"topic": "t", "to": "latest", "timestamp_ms": 5}}, 422),
            ("post", "/groups/g/reset", {"json": {"topic": "t", "to": "middle"}}, 422),
            ("get", "/groups/g/lag", {}, 422),
            ("get", "/groups/bad.group/lag", {"params": {"topic": "t"}}, 422),
        ],
    )
    def test_group_errors(
        self, client: httpx.Client, method: str, path: str, kwargs: dict, status: int
    ) -> None:
        response = client.request(method, path, **kwargs)
        assert response.status_code == status, response.text
        error_of(response)

    def test_commit_past_max_and_unknown_queue(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        past = client.put("/groups/g1/offsets", json={"topic": topic, "offsets": {"0": 5}})
        assert (past.status_code, error_of(past)) == (409, "offset_out_of_range")
        unknown = client.put("/groups/g1/offsets", json={"topic": topic, "offsets": {"3": 0}})
        assert (unknown.status_code, error_of(unknown)) == (409, "unknown_queue")


class TestOps:
    def test_healthz_docs_and_spec(self, client: httpx.Client) -> None:
        assert client.get("/healthz").json() == {"status": "ok"}
        spec = client.get("/openapi.json").json()
        assert "/topics/{topic}/messages:batch" in spec["paths"]
        assert "ProduceBatchIn" in spec["components"]["schemas"]
        assert "swagger" in client.get("/docs").text.lower()

    def test_unknown_route_and_method(self, client: httpx.Client) -> None:
        assert error_of(client.get("/nope")) == "not_found"
        response = client.delete("/healthz")
        assert (response.status_code, error_of(response)) == (405, "method_not_allowed")

    def test_metrics(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        produce(client, topic, ["12345"])
        client.post(f"/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
        client.get(f"/topics/{topic}/queues/0/messages")
        client.put("/groups/metrics_group/offsets", json={"topic": topic, "offsets": {"0": 1}})
        response = client.get("/metrics")
        assert response.headers["content-type"].startswith("text/plain")
        lines = response.text.splitlines()
        assert f'sparkmq_messages_in_total{{door="http",topic="{topic}"}} 2' in lines
        assert f'sparkmq_bytes_in_total{{door="http",topic="{topic}"}} 6' in lines
        assert f'sparkmq_messages_out_total{{door="http",topic="{topic}"}} 2' in lines
        assert f'sparkmq_bytes_out_total{{door="http",topic="{topic}"}} 6' in lines
        assert f'sparkmq_queue_max_offset{{topic="{topic}",queue_id="0"}} 2' in lines
        assert f'sparkmq_group_lag{{group="metrics_group",topic="{topic}",queue_id="0"}} 1' in lines
        assert any(line.startswith('sparkmq_produce_latency_seconds_count{kind="single"}') for line in lines)
        assert any(line.startswith("sparkmq_dispatch_lag_bytes ") for line in lines)
