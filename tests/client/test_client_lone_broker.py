"""The client against one broker without ``--cluster`` (a one-broker cluster named ``local``)."""

from __future__ import annotations

import threading
import time

import httpx
import pyarrow as pa
import pytest

from sparkmq.client import (
    BrokerUnreachable,
    Client,
    ClientConfig,
    InvalidArgument,
    Message,
    ReceivedMessage,
    RequestRefused,
    RetryPolicy,
    UnknownTopic,
)
from store import sharding_queue
from tests.ingest.conftest import RunningBroker


def test_a_lone_broker_is_a_cluster_of_one(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        info = client.cluster()
        assert (info.mode, info.self_name, info.live_brokers()) == ("single", "local", ("local",))
        assert info.brokers[0].http == lone_broker.url
        client.create_topic(topic, 4)
        route = client.route(topic)
        assert [(q.queue_id, q.broker, q.http) for q in route.queues] == [
            (q, "local", lone_broker.url) for q in range(4)
        ]


def test_send_places_messages_by_the_brokers_rules(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.create_topic(topic, 4)
        keyed = client.send(
            topic, "order 42 paid", sharding_key="customer-7", tags="paid", keys=("order-42",)
        )
        assert (keyed.queue_id, keyed.broker) == (sharding_queue("customer-7", 4), "local")
        pinned = client.send(topic, Message(b"\x00\xffbinary", queue_id=2))
        assert pinned.queue_id == 2
        spread = [client.send(topic, f"m{i}").queue_id for i in range(8)]
        assert sorted(spread) == [0, 0, 1, 1, 2, 2, 3, 3], "round robin over the queues"
        pulled = client.pull(topic, 2, pinned.queue_offset)
        assert pulled.messages[0].body == b"\x00\xffbinary" and pulled.messages[0].text is None


def test_unknown_topics_are_created_by_the_broker_on_first_send(
    lone_broker: RunningBroker, topic: str
) -> None:
    with Client(lone_broker.url) as client:
        first = client.send(topic, "hello", sharding_key="k")
        assert first.queue_id == sharding_queue("k", 4)
        assert client.route(topic).queue_count == 4


def test_batches_and_arrow(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.create_topic(topic, 3)
        results = client.send_batch(
            topic, [Message("a"), Message("b", queue_id=1), {"body": "c", "sharding_key": "x"}]
        )
        assert [r.queue_id for r in results][1:] == [1, sharding_queue("x", 3)]
        table = pa.table({"body": [b"r0", b"r1", b"r2"], "queue_id": pa.array([0, None, 2], pa.int32())})
        stored = client.send_arrow(topic, table)
        assert [r.queue_id for r in stored][0::2] == [0, 2]
        pulled = [client.pull(topic, q, 0, max_messages=50) for q in range(3)]
        bodies = sorted(m.text or "" for p in pulled for m in p.messages)
        assert bodies == ["a", "b", "c", "r0", "r1", "r2"]


def test_idempotency_key_makes_a_retry_return_the_first_result(
    lone_broker: RunningBroker, topic: str
) -> None:
    with Client(lone_broker.url) as client:
        first = client.send(topic, "once", idempotency_key="pay-1")
        again = client.send(topic, "once", idempotency_key="pay-1")
        assert again == first
        batch = [Message(f"b{i}") for i in range(3)]
        assert client.send_batch(topic, batch, idempotency_key="batch-1") == client.send_batch(
            topic, batch, idempotency_key="batch-1"
        )


def test_consumer_reads_commits_and_resumes(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.create_topic(topic, 3)
        client.send_batch(topic, [Message(f"m{i}", queue_id=i % 3) for i in range(9)])
        with client.consumer(topic, group="g") as consumer:
            first: list[ReceivedMessage] = []
            while len(first) < 4:  # a poll returns what the first answering queues had
                first += consumer.poll(max_messages=4 - len(first))
            assert len(first) == 4
            consumer.commit()
        with client.consumer(topic, group="g") as consumer:
            rest = []
            while not consumer.caught_up:
                rest += consumer.poll()
            consumer.commit()
        assert sorted(m.text or "" for m in first + rest) == [f"m{i}" for i in range(9)]
        assert client.committed_offsets("g", topic) == {0: 3, 1: 3, 2: 3}
        with client.consumer(topic, start="latest") as consumer:
            assert consumer.positions == {0: 3, 1: 3, 2: 3}
        with client.consumer(topic, queues=[1], start={1: 2}) as consumer:
            assert [m.queue_offset for m in consumer.poll()] == [2]


def test_long_poll_returns_as_soon_as_any_queue_has_a_message(lone_broker: RunningBroker, topic: str) -> None:
    with Client(lone_broker.url) as client:
        client.create_topic(topic, 4)
        with client.consumer(topic, start="latest") as consumer:
            assert consumer.poll(wait_ms=0) == []

            def produce_later() -> None:
                time.sleep(0.3)
                client.send(topic, "late", queue_id=3)

            producer = threading.Thread(target=produce_later)
            producer.start()
            got: list[ReceivedMessage] = []
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                got = consumer.poll(wait_ms=5000)
            producer.join()
            assert [(m.queue_id, m.text) for m in got] == [(3, "late")]


def test_faults_are_named_exceptions(lone_broker: RunningBroker) -> None:
    with Client(lone_broker.url) as client:
        with pytest.raises(UnknownTopic) as unknown:
            client.route("no_such_topic_here")
        assert not unknown.value.retriable and "404" in str(unknown.value)
        with pytest.raises(RequestRefused) as refused:
            client.send("bad topic name!", "x")
        assert refused.value.status == 422 and not refused.value.retriable
    fast = ClientConfig(retry=RetryPolicy(deadline_ms=300, backoff_ms=50, max_backoff_ms=100))
    with Client("http://127.0.0.1:9", config=fast) as nowhere:
        with pytest.raises(BrokerUnreachable) as unreachable:
            nowhere.send("t", "x")
        assert unreachable.value.retriable
    with pytest.raises(InvalidArgument):
        Client("ftp://127.0.0.1:8080")
    with pytest.raises(InvalidArgument):
        Message("x", keys="one-key")  # type: ignore[arg-type]


def test_token_is_sent(lone_broker: RunningBroker) -> None:
    with Client(lone_broker.url, token="anything") as client:
        # auth is off on this broker: the header is accepted and ignored
        assert client.cluster().mode == "single"
    assert httpx.get(f"{lone_broker.url}/cluster").status_code == 200
