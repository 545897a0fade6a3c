"""The client against three brokers of one cluster (real ZooKeeper, real uvicorn servers).

Whether a request went straight to its owner is read off each broker's own request counter
(``sparkmq_http_request_duration_seconds_count``): a forwarded request counts at two brokers."""

from __future__ import annotations

import re
from collections import Counter
from functools import partial

import httpx

from sparkmq.client import Client, ClientConfig, Message
from store import sharding_queue
from tests.client.conftest import read_until
from tests.cluster.inprocess import InProcessCluster
from tests.support.waiting import wait_until

_POSTS = re.compile(
    r'^sparkmq_http_request_duration_seconds_count\{method="POST",route="([^"]+)",status="(\dxx)"\} (\d+)$'
)


def produce_requests(cluster: InProcessCluster, status: str | None = None) -> Counter[str]:
    """Produce requests each broker has answered so far (single and batch; of one status class)."""
    counts: Counter[str] = Counter()
    for name, running in cluster.brokers.items():
        for line in httpx.get(f"{running.url}/metrics", timeout=30).text.splitlines():
            found = _POSTS.match(line)
            if (
                found
                and found.group(1).startswith("/topics/{topic}/messages")
                and status in (None, found.group(2))
            ):
                counts[name] += int(found.group(3))
    return counts


def _has_queues(http: httpx.Client, topic: str, count: int) -> bool:
    return len(http.get(f"/topics/{topic}/route").json()["queues"]) == count


def endpoints(cluster: InProcessCluster, *names: str) -> str:
    return ",".join(cluster.brokers[n].url for n in names)


def test_each_message_goes_straight_to_its_owner(trio: InProcessCluster) -> None:
    with Client(endpoints(trio, "b2")) as client:  # one seed: the others are discovered
        client.create_topic("direct", 6)
        route = client.route("direct")
        assert [q.broker for q in route.queues] == ["b1", "b2", "b3", "b1", "b2", "b3"]
        before = produce_requests(trio)
        keys = [f"customer-{i}" for i in range(12)]
        results = [client.send("direct", f"k{i}", sharding_key=key) for i, key in enumerate(keys)]
        results += [client.send("direct", f"q{q}", queue_id=q) for q in range(6)]
        results += [client.send("direct", f"rr{i}") for i in range(6)]
        after = produce_requests(trio)
    for result, key in zip(results, keys, strict=False):
        assert result.queue_id == sharding_queue(key, 6)
    assert all(r.broker == route.owner(r.queue_id) for r in results)
    assert sorted(r.queue_id for r in results[-6:]) == list(range(6)), "round robin over every queue"
    owned = Counter(r.broker for r in results)
    assert after - before == owned, "one request per message, at its owner only (nothing forwarded)"


def test_a_batch_is_one_request_per_owner(trio: InProcessCluster) -> None:
    with Client(endpoints(trio, "b1", "b3")) as client:
        client.create_topic("grouped", 6)
        before = produce_requests(trio)
        messages = [Message(f"s{i}", sharding_key=f"user-{i}") for i in range(20)]
        messages += [Message("pinned", queue_id=4), Message("free")]
        results = client.send_batch("grouped", messages, idempotency_key="batch-7")
        after = produce_requests(trio)
        route = client.route("grouped")
        assert all(r.broker == route.owner(r.queue_id) for r in results)
        assert [r.queue_id for r in results[:20]] == [sharding_queue(f"user-{i}", 6) for i in range(20)]
        assert after - before == Counter(dict.fromkeys({r.broker for r in results}, 1))
        again = client.send_batch("grouped", messages, idempotency_key="batch-7")
        assert [(r.broker, r.queue_id, r.queue_offset) for r in again] == [
            (r.broker, r.queue_id, r.queue_offset) for r in results
        ], "a retry of a batch that spans brokers is deduplicated part by part"
        stored = sum(q.messages or 0 for q in client.queue_offsets("grouped"))
        assert stored == len(messages)


def test_a_route_miss_after_the_topic_grows_is_refreshed(trio: InProcessCluster) -> None:
    with Client(endpoints(trio, "b1")) as client:
        client.create_topic("growing", 3)
        client.send("growing", "warm", queue_id=0)  # the client now holds the 3-queue route
        with trio.http("b3") as other:  # another client grows the topic behind this one's back
            assert other.put("/topics/growing", json={"queues": 4}).status_code == 200
        for name in ("b1", "b2", "b3"):
            with trio.http(name) as http:
                wait_until(partial(_has_queues, http, "growing", 4), 10, f"{name} to see 4 queues")
        with trio.http("b1") as http:
            owners = [q["broker"] for q in http.get("/topics/growing/route").json()["queues"]]
        key = next(k for k in (f"key-{i}" for i in range(1000))
                   if owners[sharding_queue(k, 3)] != owners[sharding_queue(k, 4)])  # fmt: skip
        before, refused_before = produce_requests(trio), produce_requests(trio, "4xx")
        moved = client.send("growing", "after", sharding_key=key)  # planned on the stale route
        assert moved.queue_id == sharding_queue(key, 4), "the owner applies the current queue count"
        middle = produce_requests(trio)
        assert sum((middle - before).values()) == 2, "the stale plan cost one attempt"
        stale_owner = owners[sharding_queue(key, 3)]
        assert produce_requests(trio, "4xx") - refused_before == Counter({stale_owner: 1}), "421 misdirected"
        direct = client.send("growing", "again", sharding_key=key)
        assert direct.queue_id == moved.queue_id and direct.broker == moved.broker
        assert produce_requests(trio) - middle == Counter({direct.broker: 1}), "the route was refreshed"


def test_consumer_reads_every_queue_from_its_owner_and_commits_there(trio: InProcessCluster) -> None:
    fast_routes = ClientConfig(route_ttl_ms=200)
    with Client(endpoints(trio, "b2"), config=fast_routes) as client:
        client.create_topic("spread", 6)
        client.send_batch("spread", [Message(f"m{i}", queue_id=i % 6) for i in range(30)])
        with client.consumer("spread", group="billing") as consumer:
            seen = []
            while not consumer.caught_up:
                seen += consumer.poll(wait_ms=100)
            committed = consumer.commit()
        assert sorted(m.text or "" for m in seen) == sorted(f"m{i}" for i in range(30))
        assert {m.broker for m in seen} == {"b1", "b2", "b3"}
        assert committed == dict.fromkeys(range(6), 5)
        for queue, owner in enumerate(["b1", "b2", "b3", "b1", "b2", "b3"]):
            with trio.http(owner) as http:
                offsets = http.get("/groups/billing/offsets", params={"topic": "spread"}).json()["offsets"]
                assert offsets[str(queue)] == 5, f"queue {queue} committed at its owner {owner}"
        assert client.committed_offsets("billing", "spread") == dict.fromkeys(range(6), 5)

        with client.consumer("spread", group="billing") as consumer:
            assert consumer.poll(wait_ms=200) == []
            client.create_topic("spread", 9)  # grows while the consumer runs
            client.send("spread", "on a new queue", queue_id=8)
            client.send("spread", "on an old queue", queue_id=0)
            late = read_until(consumer, lambda texts: len(texts) == 2, 20, "a message on a queue added later")
            assert sorted(late) == ["on a new queue", "on an old queue"]
            assert consumer.queues == list(range(9))
