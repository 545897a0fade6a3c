"""The Kafka door across three brokers of one cluster: real ZooKeeper, real uvicorn brokers with
their Kafka gateways, real confluent-kafka / kafka-python / aiokafka clients bootstrapped at ONE
broker (b1) that reach every partition, wherever it lives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.cluster.kafka_cluster import KafkaCluster
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

NAMES = ("b1", "b2", "b3")
#: Round robin over b1, b2, b3: queue q lives on NAMES[q % 3].
OWNERS = [NAMES[q % 3] for q in range(6)]
FAST: dict[str, Any] = {
    "socket.timeout.ms": 5000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 200,
    "topic.metadata.refresh.interval.ms": 1000,
}


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(zk_url, tmp_path)
    for name in NAMES:
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def create_topic(cluster: KafkaCluster, topic: str, queues: int = 6) -> None:
    with cluster.http("b2") as http:
        answer = http.put(f"/topics/{topic}", json={"queues": queues})
        assert answer.status_code in (200, 201), answer.text
    for name in cluster.brokers:  # every broker has the route before a client asks
        with cluster.http(name) as http:
            wait_until(
                lambda http=http: http.get(f"/topics/{topic}/route").status_code == 200, 10, f"{name} route"
            )


def pulled(cluster: KafkaCluster, topic: str, queue: int) -> list[str]:
    """Bodies stored in queue ``queue``, read over HTTP from its owner."""
    with cluster.http(OWNERS[queue]) as http:
        answer = http.get(f"/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max": 1000})
        assert answer.status_code == 200, answer.text
        return [m["body"] for m in answer.json()["messages"]]


def committed_over_http(cluster: KafkaCluster, group: str, topic: str) -> dict[int, int]:
    """Each queue's committed offset, read over HTTP from the queue's owner."""
    found = {}
    for queue, owner in enumerate(OWNERS):
        with cluster.http(owner) as http:
            answer = http.get(f"/groups/{group}/offsets", params={"topic": topic})
            found[queue] = answer.json()["offsets"][str(queue)] if answer.status_code == 200 else -1
    return found


def ck_consumer(bootstrap: str, group: str, **config: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100,
            **FAST,
            **config,
        }
    )


def ck_poll(client: Consumer, want: int, timeout_s: float = 30) -> list[Any]:
    got: list[Any] = []
    wait_until(lambda: _poll_into(client, got) >= want, timeout_s, f"{want} messages")
    return got


def _poll_into(client: Consumer, got: list[Any]) -> int:
    message = client.poll(0.2)
    if message is not None:
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
        else:
            got.append(message)
    return len(got)


def test_confluent_kafka_bootstrapped_at_one_broker_reaches_every_partition(trio: KafkaCluster) -> None:
    create_topic(trio, "ck-all")
    producer = Producer({"bootstrap.servers": trio.bootstrap("b1"), "enable.idempotence": True, **FAST})
    errors: list[Any] = []
    for q in range(6):
        for i in range(10):
            producer.produce(
                "ck-all", value=f"q{q}-{i}".encode(), partition=q, on_delivery=lambda e, _: e and errors.append(e)
            )
    assert producer.flush(30) == 0 and errors == []
    for q in range(6):
        assert pulled(trio, "ck-all", q) == [f"q{q}-{i}" for i in range(10)]

    consumer = ck_consumer(trio.bootstrap("b1"), "ck-readers")
    try:
        consumer.subscribe(["ck-all"])
        got = ck_poll(consumer, 60)
        assert sorted(m.value().decode() for m in got) == sorted(f"q{q}-{i}" for q in range(6) for i in range(10))
        assert {(m.partition(), m.value().decode().split("-")[0]) for m in got} == {(q, f"q{q}") for q in range(6)}
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert committed_over_http(trio, "ck-readers", "ck-all") == dict.fromkeys(range(6), 10)
