"""Real Kafka clients over SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against the gateway,
each verifying the broker's certificate against the test CA (and the host name): a produce
then a consume as ``alice``, who may write and read ``orders*``. Once over SASL_PLAINTEXT."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, Producer
from kafka import KafkaConsumer, KafkaProducer

from tests.support.secure_broker import MECHANISMS, PASSWORDS, TOKENS, SecureBroker, secure_broker

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with secure_broker(tmp_path_factory.mktemp("sasl-ssl")) as running:
        yield running


def make_topic(secured: SecureBroker, name: str) -> str:
    answer = secured.https(TOKENS["admin"]).put(f"/topics/{name}", json={"queues": 1})
    assert answer.status_code == 201, answer.text
    return name


def stored_bodies(secured: SecureBroker, topic: str) -> list[str]:
    admin = secured.https(TOKENS["admin"])
    answer = admin.get(f"/topics/{topic}/queues/0/messages", params={"offset": 0, "max_messages": 100})
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka(secured: SecureBroker, mechanism: str) -> None:
    topic = make_topic(secured, f"orders-ck-{mechanism.lower()}")
    common = {
        "bootstrap.servers": secured.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": PASSWORDS["alice"],
        "ssl.ca.location": str(secured.ca.ca_file),
    }
    producer = Producer(common)
    errors: list[KafkaError | None] = []  # one per delivery report, None when delivered
    for i in range(5):
        producer.produce(topic, f"m{i}".encode(), on_delivery=lambda err, _: errors.append(err))
    assert producer.flush(30) == 0 and errors == [None] * 5
    consumer = Consumer({**common, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes | None] = []
    try:
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
            if len(got) == 5:
                break
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python(secured: SecureBroker, mechanism: str) -> None:
    topic = make_topic(secured, f"orders-kp-{mechanism.lower()}")
    common = {
        "bootstrap_servers": secured.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORDS["alice"],
        "ssl_cafile": str(secured.ca.ca_file),
    }
    producer = KafkaProducer(**common)
    for i in range(5):
        producer.send(topic, f"m{i}".encode()).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    got = [record.value for record in consumer][:5]
    consumer.close()
    assert got == [f"m{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka(secured: SecureBroker, mechanism: str) -> None:
    topic = make_topic(secured, f"orders-aio-{mechanism.lower()}")

    async def round_trip() -> list[bytes | None]:
        common = {
            "bootstrap_servers": secured.bootstrap,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism,
            "sasl_plain_username": "alice",
            "sasl_plain_password": PASSWORDS["alice"],
            "ssl_context": create_ssl_context(cafile=str(secured.ca.ca_file)),
        }
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"m{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            batches = await consumer.getmany(timeout_ms=10_000, max_records=5)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    assert asyncio.run(round_trip()) == [f"m{i}".encode() for i in range(5)]
    assert stored_bodies(secured, topic) == [f"m{i}" for i in range(5)]


def test_sasl_plaintext_and_a_wrong_password(tmp_path: Path) -> None:
    with secure_broker(tmp_path, tls=False) as plain:
        topic = make_topic(plain, "orders-plaintext")
        common = {
            "bootstrap_servers": plain.bootstrap,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "alice",
        }
        producer = KafkaProducer(sasl_plain_password=PASSWORDS["alice"], **common)
        producer.send(topic, b"clear").get(timeout=30)
        producer.close()
        assert stored_bodies(plain, topic) == ["clear"]
        refused = Producer(
            {
                "bootstrap.servers": plain.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "alice",
                "sasl.password": "not-the-password",
            }
        )
        errors: list[KafkaError | None] = []
        refused.produce(topic, b"x", on_delivery=lambda err, _: errors.append(err))
        refused.flush(5)
        assert stored_bodies(plain, topic) == ["clear"]
