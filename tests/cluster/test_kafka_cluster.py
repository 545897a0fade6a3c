"""The Kafka door across three brokers of one cluster: real ZooKeeper, real uvicorn brokers with
their Kafka gateways, real confluent-kafka / kafka-python / aiokafka clients bootstrapped at ONE
broker (b1) that reach every partition, wherever it lives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
                "ck-all",
                value=f"q{q}-{i}".encode(),
                partition=q,
                on_delivery=lambda e, _: e and errors.append(e),
            )
    assert producer.flush(30) == 0 and errors == []
    for q in range(6):
        assert pulled(trio, "ck-all", q) == [f"q{q}-{i}" for i in range(10)]

    consumer = ck_consumer(trio.bootstrap("b1"), "ck-readers")
    try:
        consumer.subscribe(["ck-all"])
        got = ck_poll(consumer, 60)
        assert sorted(m.value().decode() for m in got) == sorted(
            f"q{q}-{i}" for q in range(6) for i in range(10)
        )
        assert {(m.partition(), m.value().decode().split("-")[0]) for m in got} == {
            (q, f"q{q}") for q in range(6)
        }
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert committed_over_http(trio, "ck-readers", "ck-all") == dict.fromkeys(range(6), 10)


def test_a_restarted_confluent_consumer_resumes_from_the_committed_offsets(trio: KafkaCluster) -> None:
    create_topic(trio, "ck-resume")
    producer = Producer({"bootstrap.servers": trio.bootstrap("b1"), **FAST})
    for i in range(30):
        producer.produce("ck-resume", value=b"first-%d" % i, key=b"key-%d" % i)
    assert producer.flush(20) == 0
    first = ck_consumer(trio.bootstrap("b1"), "ck-resumers")
    try:
        first.subscribe(["ck-resume"])
        assert len(ck_poll(first, 30)) == 30
        first.commit(asynchronous=False)
    finally:
        first.close()
    committed = committed_over_http(trio, "ck-resumers", "ck-resume")
    assert sum(committed.values()) == 30  # at each queue's owner, seen by the HTTP door

    for i in range(12):
        producer.produce("ck-resume", value=b"second-%d" % i, partition=i % 6)
    assert producer.flush(20) == 0
    again = ck_consumer(trio.bootstrap("b1"), "ck-resumers")
    try:
        again.subscribe(["ck-resume"])
        got = ck_poll(again, 12)
        assert sorted(m.value() for m in got) == sorted(b"second-%d" % i for i in range(12))
        assert [m for m in (again.poll(0.3) for _ in range(5)) if m is not None and not m.error()] == []
    finally:
        again.close()


def test_offsets_set_over_http_at_the_owners_are_what_kafka_reads(trio: KafkaCluster) -> None:
    create_topic(trio, "http-set")
    producer = Producer({"bootstrap.servers": trio.bootstrap("b1"), **FAST})
    for q in range(6):
        for i in range(5):
            producer.produce("http-set", value=f"{q}-{i}".encode(), partition=q)
    assert producer.flush(20) == 0
    for q, owner in enumerate(OWNERS):
        with trio.http(owner) as http:
            answer = http.put(
                "/groups/http-readers/offsets", json={"topic": "http-set", "offsets": {str(q): 3}}
            )
            assert answer.status_code == 200, answer.text
    reader = ck_consumer(trio.bootstrap("b3"), "http-readers")
    try:
        committed = reader.committed([TopicPartition("http-set", q) for q in range(6)], timeout=20)
        assert [(tp.partition, tp.offset) for tp in committed] == [(q, 3) for q in range(6)]
        reader.subscribe(["http-set"])
        got = ck_poll(reader, 12)
        assert sorted(m.value().decode() for m in got) == sorted(f"{q}-{i}" for q in range(6) for i in (3, 4))
    finally:
        reader.close()


def test_kafka_python_bootstrapped_at_one_broker_with_a_group_and_a_restart(trio: KafkaCluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    create_topic(trio, "kp-all")
    fast = {"request_timeout_ms": 5000, "metadata_max_age_ms": 2000, "reconnect_backoff_ms": 20}
    producer = KafkaProducer(bootstrap_servers=trio.bootstrap("b1"), linger_ms=2, **fast)
    try:
        futures = [producer.send("kp-all", value=b"kp-%d" % i, partition=i % 6) for i in range(36)]
        producer.flush(20)
        assert sorted((f.get(10).partition, f.get(10).offset) for f in futures) == sorted(
            (q, i) for q in range(6) for i in range(6)
        )
    finally:
        producer.close()

    def consume(want: int) -> list[bytes]:
        consumer = KafkaConsumer(
            "kp-all",
            bootstrap_servers=trio.bootstrap("b1"),
            group_id="kp-readers",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
            **fast,
        )
        try:
            got: list[bytes] = []
            wait_until(
                lambda: (
                    got.extend(r.value for rs in consumer.poll(200).values() for r in rs) or len(got) >= want
                ),
                30,
                f"{want} records",
            )
            consumer.commit()
            return got
        finally:
            consumer.close()

    assert sorted(consume(36)) == sorted(b"kp-%d" % i for i in range(36))
    assert committed_over_http(trio, "kp-readers", "kp-all") == dict.fromkeys(range(6), 6)
    producer = KafkaProducer(bootstrap_servers=trio.bootstrap("b2"), **fast)
    for i in range(6):
        producer.send("kp-all", value=b"late-%d" % i, partition=i)
    producer.flush(20)
    producer.close()
    assert sorted(consume(6)) == sorted(b"late-%d" % i for i in range(6))
    assert committed_over_http(trio, "kp-readers", "kp-all") == dict.fromkeys(range(6), 7)


def test_aiokafka_bootstrapped_at_one_broker_with_a_group_and_a_restart(trio: KafkaCluster) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create_topic(trio, "aio-all")
    bootstrap = trio.bootstrap("b1")

    async def produce(prefix: str, count: int) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            for i in range(count):
                await producer.send_and_wait("aio-all", b"%s-%d" % (prefix.encode(), i), partition=i % 6)
        finally:
            await producer.stop()

    async def consume(want: int) -> list[bytes]:
        consumer = AIOKafkaConsumer(
            "aio-all",
            bootstrap_servers=bootstrap,
            group_id="aio-readers",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        try:
            got: list[bytes] = []
            while len(got) < want:
                batch = await consumer.getmany(timeout_ms=500)
                got.extend(m.value for records in batch.values() for m in records)
            await consumer.commit()
            return got
        finally:
            await consumer.stop()

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        await produce("a", 24)
        first = await consume(24)
        await produce("b", 6)
        return first, await consume(6)

    first, second = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert sorted(first) == sorted(b"a-%d" % i for i in range(24))
    assert sorted(second) == sorted(b"b-%d" % i for i in range(6))
    assert committed_over_http(trio, "aio-readers", "aio-all") == dict.fromkeys(range(6), 5)


def test_a_topic_auto_created_through_the_cluster_spreads_over_every_broker(trio: KafkaCluster) -> None:
    producer = Producer({"bootstrap.servers": trio.bootstrap("b2"), **FAST})
    for i in range(12):
        producer.produce("auto.created", value=b"v%d" % i, key=b"k%d" % i)
    assert producer.flush(30) == 0
    with trio.http("b1") as http:
        route = http.get("/topics/auto%252Ecreated/route").json()  # store name auto%2Ecreated
    assert sorted({q["broker"] for q in route["queues"]}) == list(NAMES)
    assert len(route["queues"]) == 6  # the cluster's default queue count


def test_create_topics_through_the_cluster_places_once_and_refuses_an_existing_topic(
    trio: KafkaCluster,
) -> None:
    """confluent-kafka's AdminClient: CreateTopics at one broker places the topic over every
    broker; a second CreateTopics of it, at another broker, answers TOPIC_ALREADY_EXISTS and
    leaves its placement as it is."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    first = AdminClient({"bootstrap.servers": trio.bootstrap("b1")})
    first.create_topics([NewTopic("admin-made", num_partitions=3)])["admin-made"].result(30)
    with trio.http("b3") as http:
        wait_until(lambda: http.get("/topics/admin-made/route").status_code == 200, 10, "the route at b3")
        placed = http.get("/topics/admin-made/route").json()["queues"]
    assert sorted(q["broker"] for q in placed) == list(NAMES)
    again = AdminClient({"bootstrap.servers": trio.bootstrap("b3")})
    with pytest.raises(Exception) as refused:
        again.create_topics([NewTopic("admin-made", num_partitions=5)])["admin-made"].result(30)
    assert refused.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    with trio.http("b2") as http:
        assert http.get("/topics/admin-made/route").json()["queues"] == placed
