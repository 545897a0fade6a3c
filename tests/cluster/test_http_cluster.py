"""The HTTP door across three brokers of one cluster (real ZooKeeper, real uvicorn servers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import ClusterView
from store import sharding_queue
from tests.cluster.inprocess import InProcessCluster
from tests.support.waiting import wait_until


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def test_routes_are_the_same_on_every_broker(trio: InProcessCluster) -> None:
    with trio.http("b2") as http:
        created = http.put("/topics/orders", json={"queues": 6})
        assert created.status_code == 201, created.text
    routes = []
    for name in ("b1", "b2", "b3"):
        with trio.http(name) as http:
            route = wait_until(
                lambda http=http: (r := http.get("/topics/orders/route")).status_code == 200 and r.json(),
                5,
                "the route",
            )
            routes.append(route)
            cluster = http.get("/cluster").json()
            assert cluster["mode"] == "cluster" and cluster["self"] == name
            assert [(b["name"], b["alive"], b["queues"]) for b in cluster["brokers"]] == [
                ("b1", True, 2),
                ("b2", True, 2),
                ("b3", True, 2),
            ]
    assert routes[0] == routes[1] == routes[2]
    assert [q["broker"] for q in routes[0]["queues"]] == ["b1", "b2", "b3", "b1", "b2", "b3"]
    assert routes[0]["queues"][2]["http"] == trio.brokers["b3"].url


def test_sharding_key_lands_on_the_same_queue_whichever_broker_receives_it(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/keyed", json={"queues": 6})
    key = "customer-7"
    queue = sharding_queue(key, 6)
    owner = ["b1", "b2", "b3", "b1", "b2", "b3"][queue]
    seen = []
    for name in ("b1", "b2", "b3"):
        with trio.http(name) as http:
            answer = http.post("/topics/keyed/messages", json={"body": f"via {name}", "sharding_key": key})
            assert answer.status_code == 201, answer.text
            seen.append((answer.json()["queue_id"], answer.json()["broker"], answer.json()["queue_offset"]))
    assert seen == [(queue, owner, 0), (queue, owner, 1), (queue, owner, 2)]
    with trio.http(owner) as http:
        pulled = http.get(f"/topics/keyed/queues/{queue}/messages", params={"offset": 0}).json()
        assert [m["body"] for m in pulled["messages"]] == ["via b1", "via b2", "via b3"]


def test_messages_without_a_key_stay_on_the_receiving_broker(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/local", json={"queues": 6})
    with trio.http("b2") as http:
        answers = [http.post("/topics/local/messages", json={"body": str(i)}).json() for i in range(4)]
    assert {a["broker"] for a in answers} == {"b2"}
    assert [a["queue_id"] for a in answers] == [1, 4, 1, 4]  # b2's own queues, round robin


def test_a_batch_that_spans_brokers_is_answered_per_entry(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/spread", json={"queues": 3})
        batch = {"messages": [{"body": f"m{q}", "queue_id": q} for q in (0, 1, 2, 1)] + [{"body": "free"}]}
        answer = http.post("/topics/spread/messages:batch", json=batch)
        assert answer.status_code == 201, answer.text
        results = answer.json()["results"]
    assert [(r["queue_id"], r["broker"]) for r in results] == [
        (0, "b1"), (1, "b2"), (2, "b3"), (1, "b2"), (0, "b1"),
    ]  # fmt: skip
    assert [r["queue_offset"] for r in results] == [0, 0, 0, 1, 1]


def test_a_dead_brokers_queues_are_refused_by_name(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/gap", json={"queues": 3})
    trio.stop("b3")
    with trio.http("b1") as http:
        wait_until(
            lambda: [b["alive"] for b in http.get("/cluster").json()["brokers"]] == [True, True, False],
            5,
            "b3 dead",
        )
        refused = http.post("/topics/gap/messages", json={"body": "x", "queue_id": 2})
        assert refused.status_code == 503
        assert refused.json()["error"] == "queue_unavailable" and refused.json()["broker"] == "b3"
        batch = {"messages": [{"body": "a", "queue_id": 1}, {"body": "b", "queue_id": 2}]}
        partial = http.post("/topics/gap/messages:batch", json=batch)
        assert partial.status_code == 207
        first, second = partial.json()["results"]
        assert first["broker"] == "b2" and first["queue_offset"] == 0
        assert second == {
            "index": 1, "error": "queue_unavailable", "message": second["message"], "broker": "b3",
        }  # fmt: skip
        assert http.post("/topics/gap/messages", json={"body": "free"}).status_code == 201


def test_idempotent_retry_through_another_broker_is_deduplicated(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/idem", json={"queues": 6})
    headers = {"Idempotency-Key": "order-42-attempt"}
    answers = []
    for name in ("b1", "b2", "b3", "b2"):
        with trio.http(name) as http:
            answer = http.post("/topics/idem/messages", json={"body": "once"}, headers=headers)
            assert answer.status_code == 201, answer.text
            answers.append(answer.json())
    assert all(a == answers[0] for a in answers)
    with trio.http("b1") as http:
        described = http.get("/topics/idem").json()
    assert sum(q["max_offset"] for q in described["queue_offsets"]) == 1


def test_pull_of_a_queue_elsewhere_redirects_to_its_owner(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/pulled", json={"queues": 3})
        assert http.post("/topics/pulled/messages", json={"body": "on b3", "queue_id": 2}).status_code == 201
        moved = http.get("/topics/pulled/queues/2/messages", params={"offset": 0, "wait_ms": 10})
        assert moved.status_code == 307
        assert (
            moved.headers["location"]
            == f"{trio.brokers['b3'].url}/topics/pulled/queues/2/messages?offset=0&wait_ms=10"
        )
        assert moved.json()["error"] == "queue_elsewhere" and moved.json()["broker"] == "b3"
    with trio.brokers["b1"].client(follow_redirects=True) as following:
        pulled = following.get("/topics/pulled/queues/2/messages", params={"offset": 0})
        assert [m["body"] for m in pulled.json()["messages"]] == ["on b3"]
        offset = following.get("/topics/pulled/queues/2/offset", params={"timestamp_ms": 0})
        assert offset.status_code == 200 and offset.json()["offset"] == 0


def test_a_broker_whose_watch_lags_takes_forwarded_writes_and_reads_of_a_new_topic(
    trio: InProcessCluster,
) -> None:
    """Seen in CI: b1 created a topic and forwarded a write to b3 before b3's watch brought the
    route; b3 must look the topic up in ZooKeeper rather than refuse it or answer it empty."""
    with trio.http("b1") as http:
        assert http.put("/topics/lagged", json={"queues": 3}).status_code == 201
    b3 = trio.brokers["b3"].server.app.state.broker.cluster  # type: ignore[attr-defined]
    wait_until(lambda: b3.view.placement("lagged") is not None, 5, "the route at b3")

    def lag() -> None:  # the view as before the watch fired (no listener told: they keep the queues)
        with b3._lock:
            b3._placements.pop("lagged")
            b3._view = ClusterView(groups=b3._view.groups, topics=dict(b3._placements))

    lag()
    with trio.http("b1") as http:
        stored = http.post("/topics/lagged/messages", json={"body": "on b3", "queue_id": 2})
        assert stored.status_code == 201, stored.text
    lag()
    with trio.http("b3") as http:
        pulled = http.get("/topics/lagged/queues/2/messages", params={"offset": 0})
        assert pulled.status_code == 200, pulled.text
        assert [m["body"] for m in pulled.json()["messages"]] == ["on b3"]


def test_lookups_and_groups_answer_for_the_whole_cluster(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/looked", json={"queues": 3})
        stored = [
            http.post(
                "/topics/looked/messages", json={"body": f"q{q}", "queue_id": q, "keys": ["shared"]}
            ).json()
            for q in range(3)
        ]
    with trio.http("b2") as http:
        by_key = http.get("/topics/looked/messages", params={"key": "shared"}).json()["messages"]
        assert sorted(m["body"] for m in by_key) == ["q0", "q1", "q2"]
        for answer in stored:  # by offsetMsgId and by UNIQ_KEY, whichever broker stored it
            assert http.get(f"/messages/{answer['msg_id']}").json()["uniq_key"] == answer["uniq_key"]
            assert http.get(f"/messages/{answer['uniq_key']}").json()["body"] == f"q{answer['queue_id']}"
        assert http.get("/messages/00000000000000000000000000000000").status_code == 404
        committed = http.put("/groups/g1/offsets", json={"topic": "looked", "offsets": {"0": 1, "2": 1}})
        assert committed.status_code == 200, committed.text
        assert committed.json()["offsets"] == {"0": 1, "1": -1, "2": 1}
    with trio.http("b3") as http:
        assert http.get("/groups/g1/offsets", params={"topic": "looked"}).json()["offsets"] == {
            "0": 1,
            "1": -1,
            "2": 1,
        }
        lag = http.get("/groups/g1/lag", params={"topic": "looked"}).json()
        assert [(q["queue_id"], q["lag"]) for q in lag["queues"]] == [(0, 0), (1, 1), (2, 0)]
        described = http.get("/groups/g1").json()
        assert [(q["topic"], q["queue_id"], q["committed_offset"]) for q in described["queues"]] == [
            ("looked", 0, 1), ("looked", 1, -1), ("looked", 2, 1),
        ]  # fmt: skip
        assert described["total_lag"] == 1
        assert http.get("/groups").json()["groups"]["g1"] == ["looked"]
        reset = http.post("/groups/g1/reset", json={"topic": "looked", "to": "earliest"}).json()
        assert reset["offsets"] == {"0": 0, "1": 0, "2": 0}
    with trio.http("b1") as http:
        assert http.get("/groups/g1/offsets", params={"topic": "looked"}).json()["offsets"] == {
            "0": 0,
            "1": 0,
            "2": 0,
        }
        described = http.get("/topics/looked").json()
        assert [(q["queue_id"], q["max_offset"], q["broker"]) for q in described["queue_offsets"]] == [
            (0, 1, "b1"), (1, 1, "b2"), (2, 1, "b3"),
        ]  # fmt: skip


def test_a_transaction_lives_on_one_broker_and_ends_from_any(trio: InProcessCluster) -> None:
    with trio.http("b1") as http:
        http.put("/topics/tx", json={"queues": 3})
        half = http.post(
            "/topics/tx/messages",
            json={"body": "paid", "queue_id": 1, "transaction": {"producer_group": "billing"}},
        )
        assert half.status_code == 201, half.text
        assert half.json()["broker"] == "b2"
        txid = half.json()["transaction_id"]
        spanning = http.post(
            "/topics/tx/messages:batch",
            json={
                "messages": [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 1}],
                "transaction": {"producer_group": "billing"},
            },
        )
        assert spanning.status_code == 400 and spanning.json()["error"] == "transaction_spans_brokers"
    with trio.http("b3") as http:
        assert http.get(f"/transactions/{txid}").json()["state"] == "prepared"
        ended = http.post(f"/transactions/{txid}", json={"action": "commit", "producer_group": "billing"})
        assert ended.status_code == 200, ended.text
        assert ended.json()["state"] == "committed"
        assert (
            http.post(
                "/transactions/0123456789ABCDEF0123456789ABCDEF",
                json={"action": "commit", "producer_group": "billing"},
            ).status_code
            == 404
        )
    with trio.http("b2") as http:
        pulled = http.get("/topics/tx/queues/1/messages", params={"offset": 0}).json()
        assert [m["body"] for m in pulled["messages"]] == ["paid"]


def test_healthz_reports_the_cluster_session(trio: InProcessCluster) -> None:
    with trio.http("b2") as http:
        assert http.get("/healthz").json() == {
            "status": "ok",
            "cluster": {"broker": "b2", "session": "connected", "registered": True, "warnings": []},
        }


def test_a_system_topic_routes_to_the_asked_broker(trio: InProcessCluster) -> None:
    with trio.http("b2") as http:
        http.put("/topics/later", json={"queues": 3})
        parked = http.post("/topics/later/messages", json={"body": "soon", "queue_id": 1, "delay_level": 3})
        assert parked.status_code == 201 and parked.json()["topic"] == "SCHEDULE_TOPIC_XXXX"
        route = http.get("/topics/SCHEDULE_TOPIC_XXXX/route").json()
        assert {q["broker"] for q in route["queues"]} == {"b2"}
        assert len(route["queues"]) >= 3


def test_pop_groups_are_listed_merged_over_the_brokers(trio: InProcessCluster) -> None:
    handles: dict[str, list[str]] = {}
    for name, count in (("b1", 3), ("b2", 2)):  # messages without a key stay on the broker asked
        with trio.http(name) as http:
            if name == "b1":
                assert http.put("/topics/popped", json={"queues": 3}).status_code == 201
            for i in range(count):
                assert http.post("/topics/popped/messages", json={"body": f"{name}-{i}"}).status_code == 201
            spec = {"max_messages": 32, "invisible_ms": 60_000}
            got = http.post("/groups/popper/topics/popped/messages:receive", json=spec).json()["messages"]
            assert sorted(m["body"] for m in got) == [f"{name}-{i}" for i in range(count)]
            handles[name] = [m["receipt_handle"] for m in got]

    def popper(http: httpx.Client) -> dict[str, Any]:
        rows = [row for row in http.get("/groups").json()["summaries"] if row["group"] == "popper"]
        assert len(rows) == 1
        return dict(rows[0])

    with trio.http("b3") as http:  # b3 has none of the group's state: it asks the others
        listed = popper(http)
        assert (listed["kind"], listed["topics"], listed["pop"]["inflight"]) == ("pop", ["popped"], 5)
        acked = http.post(
            "/groups/popper/messages:ack", json={"receipt_handles": [*handles["b1"][:2], handles["b2"][0]]}
        )
        assert acked.json()["acked"] == 3  # forwarded to each handle's broker
        assert popper(http)["pop"]["inflight"] == 2
        assert "popper" not in http.get("/groups").json()["groups"]
