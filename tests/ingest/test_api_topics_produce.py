"""Topics and produce endpoints against a real broker."""

from __future__ import annotations

import base64
import json

import httpx
import pyarrow as pa
import pytest

from store import sharding_queue

from .conftest import BrokerFactory
from .test_batches import arrow_bytes

ARROW = "application/vnd.apache.arrow.stream"


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) >= {"error", "message"}, body
    return str(body["error"])


class TestTopics:
    def test_create_grow_list_describe_delete(self, client: httpx.Client, topic: str) -> None:
        created = client.put(f"/topics/{topic}", json={"queues": 2})
        assert created.status_code == 201
        assert created.json() == {"topic": topic, "queues": 2, "queue_offsets": None}
        grown = client.put(f"/topics/{topic}", json={"queues": 3})
        assert (grown.status_code, grown.json()["queues"]) == (200, 3)
        # never shrinks
        assert client.put(f"/topics/{topic}", json={"queues": 1}).json()["queues"] == 3
        listed = client.get("/topics").json()["topics"]
        assert {"topic": topic, "queues": 3, "queue_offsets": None} in listed
        client.post(f"/topics/{topic}/messages", json={"body": "x", "queue_id": 1})
        described = client.get(f"/topics/{topic}").json()
        assert described["queue_offsets"] == [
            {"queue_id": 0, "min_offset": 0, "max_offset": 0},
            {"queue_id": 1, "min_offset": 0, "max_offset": 1},
            {"queue_id": 2, "min_offset": 0, "max_offset": 0},
        ]
        assert client.delete(f"/topics/{topic}").status_code == 204
        assert client.get(f"/topics/{topic}").status_code == 404
        assert error_of(client.delete(f"/topics/{topic}")) == "unknown_topic"

    @pytest.mark.parametrize(
        ("path", "body", "status"),
        [
            ("/topics/ok_name", {"queues": 0}, 422),
            ("/topics/ok_name", {"queues": 5000}, 422),
            ("/topics/ok_name", {}, 422),
            ("/topics/bad.name", {"queues": 1}, 422),
            ("/topics/SCHEDULE_TOPIC_XXXX", {"queues": 1}, 400),
        ],
    )
    def test_invalid_topic_requests(self, client: httpx.Client, path: str, body: object, status: int) -> None:
        response = client.put(path, json=body)
        assert response.status_code == status
        error_of(response)

    def test_unknown_topic_is_404(self, client: httpx.Client) -> None:
        response = client.get("/topics/never_created_topic")
        assert (response.status_code, error_of(response)) == (404, "unknown_topic")

    def test_non_json_body_is_415(self, client: httpx.Client, topic: str) -> None:
        response = client.put(f"/topics/{topic}", content=b"queues=1", headers={"content-type": "text/plain"})
        assert (response.status_code, error_of(response)) == (415, "unsupported_media_type")


class TestProduceOne:
    def test_text_body_with_everything(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 4})
        response = client.post(
            f"/topics/{topic}/messages",
            json={
                "body": "héllo",
                "tags": "paid",
                "keys": ["o-1", "c-9"],
                "properties": {"a": "b"},
                "queue_id": 2,
            },
        )
        assert response.status_code == 201, response.text
        result = response.json()
        assert set(result) == {
            "msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp",
        }  # fmt: skip
        assert (result["topic"], result["queue_id"], result["queue_offset"]) == (topic, 2, 0)
        assert len(result["msg_id"]) == 32
        pulled = client.get(f"/topics/{topic}/queues/2/messages").json()["messages"][0]
        assert pulled["body"] == "héllo"
        assert pulled["body_base64"] is None
        assert (pulled["tags"], pulled["keys"], pulled["properties"]) == ("paid", ["o-1", "c-9"], {"a": "b"})
        assert (pulled["msg_id"], pulled["uniq_key"]) == (result["msg_id"], result["uniq_key"])

    def test_binary_body(self, client: httpx.Client, topic: str) -> None:
        raw = bytes(range(256))
        result = client.post(
            f"/topics/{topic}/messages", json={"body_base64": base64.b64encode(raw).decode(), "queue_id": 0}
        ).json()
        pulled = client.get(f"/topics/{topic}/queues/0/messages").json()["messages"][0]
        assert pulled["body"] is None
        assert base64.b64decode(pulled["body_base64"]) == raw
        assert pulled["queue_offset"] == result["queue_offset"]

    def test_round_robin_and_sharding_key(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 4})
        spread = [
            client.post(f"/topics/{topic}/messages", json={"body": "x"}).json()["queue_id"] for _ in range(8)
        ]
        assert sorted(spread) == [0, 0, 1, 1, 2, 2, 3, 3]
        sharded = {
            client.post(f"/topics/{topic}/messages", json={"body": "x", "sharding_key": "order-7"}).json()[
                "queue_id"
            ]
            for _ in range(5)
        }
        assert sharded == {sharding_queue("order-7", 4)}

    def test_delay_level_parks_the_message(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        result = client.post(f"/topics/{topic}/messages", json={"body": "later", "delay_level": 3}).json()
        assert result["topic"] == "SCHEDULE_TOPIC_XXXX"
        assert result["queue_id"] == 2
        assert client.get(f"/topics/{topic}/queues/0/messages").json()["messages"] == []

    @pytest.mark.parametrize(
        "body",
        [
            {},
            {"body": "a", "body_base64": "YQ=="},
            {"body_base64": "%%%"},
            {"body": "a", "delay_level": "soon"},
            {"body": "a", "deliver_at_ms": 1.5},
            {"body": "a", "queue_id": -1},
            {"body": "a", "queue_id": 0, "sharding_key": "k"},
            {"body": "a", "keys": ["with space"]},
            {"body": "a", "properties": {"UNIQ_KEY": "x"}},
            {"body": "a", "properties": {"TTL": "5"}},  # any RocketMQ system property
            {"body": "a", "extra": True},
            {"body": 5},
        ],
    )
    def test_invalid_fields_are_422(self, client: httpx.Client, topic: str, body: object) -> None:
        response = client.post(f"/topics/{topic}/messages", json=body)
        assert (response.status_code, error_of(response)) == (422, "validation_error")

    def test_unknown_queue_is_409(self, client: httpx.Client, topic: str) -> None:
        """A well-formed request that conflicts with the topic's current state (it has 2 queues)."""
        client.put(f"/topics/{topic}", json={"queues": 2})
        response = client.post(f"/topics/{topic}/messages", json={"body": "a", "queue_id": 2})
        assert (response.status_code, error_of(response)) == (409, "unknown_queue")

    def test_body_over_4_mib_is_413(self, client: httpx.Client, topic: str) -> None:
        response = client.post(f"/topics/{topic}/messages", json={"body": "x" * (4 * 1024 * 1024 + 1)})
        assert (response.status_code, error_of(response)) == (413, "message_too_large")

    def test_properties_over_32_kib_are_413(self, client: httpx.Client, topic: str) -> None:
        response = client.post(
            f"/topics/{topic}/messages", json={"body": "a", "properties": {"p": "v" * 40_000}}
        )
        assert (response.status_code, error_of(response)) == (413, "message_too_large")

    def test_wrong_media_type_is_415(self, client: httpx.Client, topic: str) -> None:
        response = client.post(
            f"/topics/{topic}/messages", content=b"hi", headers={"content-type": "text/plain"}
        )
        assert (response.status_code, error_of(response)) == (415, "unsupported_media_type")

    def test_malformed_json_is_422(self, client: httpx.Client, topic: str) -> None:
        response = client.post(
            f"/topics/{topic}/messages", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert response.status_code == 422
        error_of(response)


class TestProduceBatch:
    def test_json_batch_in_order(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        messages = [{"body": f"m{i}", "queue_id": 1} for i in range(5)]
        response = client.post(f"/topics/{topic}/messages:batch", json={"messages": messages})
        assert response.status_code == 201, response.text
        assert [r["queue_offset"] for r in response.json()["results"]] == [0, 1, 2, 3, 4]
        bodies = [m["body"] for m in client.get(f"/topics/{topic}/queues/1/messages").json()["messages"]]
        assert bodies == [f"m{i}" for i in range(5)]

    def test_bodies_averaging_the_first_ones_length_come_back_whole(
        self, client: httpx.Client, topic: str
    ) -> None:
        """7, 8, 8 and 5 bytes: four times the first's length, which the batch encoder once took
        for a batch of one body length, storing the bodies cut at every 7th byte."""
        client.put(f"/topics/{topic}", json={"queues": 1})
        sent = ["t:h-9-9", "t:h-10-1", "t:h-10-3", "t:k-1"]
        messages = [{"body": body, "queue_id": 0} for body in sent]
        assert client.post(f"/topics/{topic}/messages:batch", json={"messages": messages}).status_code == 201
        stored = [m["body"] for m in client.get(f"/topics/{topic}/queues/0/messages").json()["messages"]]
        assert stored == sent

    def test_ndjson_batch(self, client: httpx.Client, topic: str) -> None:
        lines = "\n".join(json.dumps({"body": f"n{i}", "queue_id": 0, "tags": "t"}) for i in range(3))
        response = client.post(
            f"/topics/{topic}/messages:batch", content=lines, headers={"content-type": "application/x-ndjson"}
        )
        assert response.status_code == 201, response.text
        assert len(response.json()["results"]) == 3
        assert client.get(f"/topics/{topic}").json()["queue_offsets"][0]["max_offset"] == 3

    def test_arrow_batch(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 3})
        n = 300
        table = pa.table(
            {
                "body": pa.array([f"a{i}".encode() for i in range(n)], pa.binary()),
                "tags": pa.array(["even" if i % 2 == 0 else "odd" for i in range(n)]),
                "keys": pa.array([[f"k{i}"] for i in range(n)], pa.list_(pa.string())),
                "queue_id": pa.array([i % 3 for i in range(n)], pa.int32()),
            }
        )
        response = client.post(
            f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers={"content-type": ARROW}
        )
        assert response.status_code == 201, response.text
        results = response.json()["results"]
        assert [r["queue_id"] for r in results] == [i % 3 for i in range(n)]
        offsets = client.get(f"/topics/{topic}").json()["queue_offsets"]
        assert [q["max_offset"] for q in offsets] == [100, 100, 100]
        found = client.get(f"/topics/{topic}/messages", params={"key": "k7"}).json()["messages"]
        assert [m["body"] for m in found] == ["a7"]

    def test_arrow_results_on_request(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        table = pa.table(
            {"body": pa.array([b"r0", b"r1", b"r2"]), "queue_id": pa.array([1, 1, 1], pa.int32())}
        )
        headers = {"content-type": ARROW, "accept": ARROW}
        response = client.post(f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers=headers)
        assert (response.status_code, response.headers["content-type"]) == (201, ARROW)
        results = pa.ipc.open_stream(response.content).read_all()
        assert results.column_names == [
            "msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp",
        ]  # fmt: skip
        assert results.column("queue_offset").to_pylist() == [0, 1, 2]
        found = client.get(f"/messages/{results.column('msg_id')[2].as_py()}").json()
        assert (found["body"], found["uniq_key"]) == ("r2", results.column("uniq_key")[2].as_py())
        delayed = client.post(
            f"/topics/{topic}/messages:batch",
            json={"messages": [{"body": "later", "delay_level": 1}]},
            headers={"accept": ARROW},
        )
        assert pa.ipc.open_stream(delayed.content).read_all().column("topic").to_pylist() == [
            "SCHEDULE_TOPIC_XXXX"
        ]

    def test_arrow_batch_with_string_body_and_sharding(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 4})
        table = pa.table({"body": pa.array(["s1", "s2"]), "sharding_key": pa.array(["user-1", "user-1"])})
        response = client.post(
            f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers={"content-type": ARROW}
        )
        assert response.status_code == 201, response.text
        expected = sharding_queue("user-1", 4)
        assert [r["queue_id"] for r in response.json()["results"]] == [expected, expected]

    def test_arrow_batch_mixed_rows_fall_back_to_row_path(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        table = pa.table(
            {
                "body": pa.array([b"p0", b"p1", b"p2"]),
                "properties": pa.array(
                    [[("color", "red")], None, [("size", "L"), ("color", "blue")]],
                    pa.map_(pa.string(), pa.string()),
                ),
                "keys": pa.array([["a", "b"], [], None], pa.list_(pa.string())),
                "queue_id": pa.array([1, None, 1], pa.int32()),
                "delay_level": pa.array([None, None, None], pa.int32()),
            }
        )
        response = client.post(
            f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers={"content-type": ARROW}
        )
        assert response.status_code == 201, response.text
        assert [r["queue_id"] for r in response.json()["results"]][::2] == [1, 1]
        pulled = client.get(f"/topics/{topic}/queues/1/messages").json()["messages"]
        assert [(m["body"], m["properties"], m["keys"]) for m in pulled] == [
            ("p0", {"color": "red"}, ["a", "b"]),
            ("p2", {"size": "L", "color": "blue"}, []),
        ]

    def test_arrow_batch_columnar_properties(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        table = pa.table(
            {
                "body": pa.array([b"c0", b"c1"]),
                "properties": pa.array([[("color", "red")], None], pa.map_(pa.string(), pa.string())),
                "keys": pa.array([["a", "b"], []], pa.list_(pa.string())),
                "tags": pa.array(["t", None]),
            }
        )
        response = client.post(
            f"/topics/{topic}/messages:batch", content=arrow_bytes(table), headers={"content-type": ARROW}
        )
        assert response.status_code == 201, response.text
        pulled = client.get(f"/topics/{topic}/queues/0/messages").json()["messages"]
        assert [(m["properties"], m["keys"], m["tags"]) for m in pulled] == [
            ({"color": "red"}, ["a", "b"], "t"),
            ({}, [], None),
        ]

    @pytest.mark.parametrize("kind", ["json", "ndjson", "arrow"])
    def test_invalid_entry_refuses_whole_batch(self, client: httpx.Client, topic: str, kind: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 1})
        if kind == "arrow":
            table = pa.table({"body": pa.array([b"ok", b"ok", None], pa.binary())})
            content, media = arrow_bytes(table), ARROW
        elif kind == "ndjson":
            content, media = b'{"body":"ok"}\n{"body":"ok"}\n{"nobody":1}\n', "application/x-ndjson"
        else:
            content = json.dumps({"messages": [{"body": "ok"}, {"body": "ok"}, {"tags": "x"}]}).encode()
            media = "application/json"
        response = client.post(
            f"/topics/{topic}/messages:batch", content=content, headers={"content-type": media}
        )
        assert response.status_code == 422, response.text
        assert response.json()["index"] == 2
        assert client.get(f"/topics/{topic}").json()["queue_offsets"][0]["max_offset"] == 0

    def test_unknown_queue_and_large_body_name_the_entry(self, client: httpx.Client, topic: str) -> None:
        client.put(f"/topics/{topic}", json={"queues": 2})
        bad_queue = client.post(
            f"/topics/{topic}/messages:batch",
            json={"messages": [{"body": "a"}, {"body": "b", "queue_id": 5}]},
        )
        assert (bad_queue.status_code, bad_queue.json()["index"]) == (409, 1)
        big = "x" * (4 * 1024 * 1024 + 1)
        too_large = client.post(f"/topics/{topic}/messages:batch", json={"messages": [{"body": big}]})
        assert (too_large.status_code, error_of(too_large), too_large.json()["index"]) == (
            413, "message_too_large", 0,
        )  # fmt: skip
        offsets = client.get(f"/topics/{topic}").json()["queue_offsets"]
        assert [q["max_offset"] for q in offsets] == [0, 0]

    def test_media_type_and_size_errors(self, client: httpx.Client, topic: str) -> None:
        path = f"/topics/{topic}/messages:batch"
        response = client.post(path, content=b"x", headers={"content-type": "text/csv"})
        assert (response.status_code, error_of(response)) == (415, "unsupported_media_type")
        response = client.post(path, content=b"garbage", headers={"content-type": ARROW})
        assert (response.status_code, error_of(response)) == (400, "invalid_arrow_batch")
        response = client.post(path, json={"messages": []})
        assert (response.status_code, error_of(response)) == (400, "empty_batch")


def test_batch_limit_and_request_size(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(max_batch_messages=3, max_request_bytes=64 * 1024)
    client = broker.client()
    path = "/topics/limited/messages:batch"
    response = client.post(path, json={"messages": [{"body": "a"}] * 4})
    assert (response.status_code, error_of(response)) == (413, "batch_too_large")
    response = client.post(path, json={"messages": [{"body": "a" * 70_000}]})
    assert (response.status_code, error_of(response)) == (413, "request_too_large")

    def chunks() -> object:
        for _ in range(100):
            yield b" " * 1024

    response = client.post(path, content=chunks(), headers={"content-type": "application/json"})  # type: ignore[arg-type]
    assert (response.status_code, error_of(response)) == (413, "request_too_large")
    single = client.post(
        "/topics/limited/messages", content=chunks(), headers={"content-type": "application/json"}
    )  # type: ignore[arg-type]
    assert (single.status_code, error_of(single)) == (413, "request_too_large")
    assert client.get("/topics/limited").status_code == 404

    def small() -> object:
        yield b'{"messages": [{"body": "chunked"},'
        yield b' {"body": "ok"}]}'

    response = client.post(path, content=small(), headers={"content-type": "application/json"})  # type: ignore[arg-type]
    assert (response.status_code, len(response.json()["results"])) == (201, 2)


def test_auto_create_off(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(store={"auto_create_topics": False})
    client = broker.client()
    response = client.post("/topics/missing/messages", json={"body": "a"})
    assert (response.status_code, error_of(response)) == (404, "unknown_topic")
    response = client.post("/topics/missing/messages:batch", json={"messages": [{"body": "a"}]})
    assert response.status_code == 404
    client.put("/topics/missing", json={"queues": 1})
    assert client.post("/topics/missing/messages", json={"body": "a"}).status_code == 201
