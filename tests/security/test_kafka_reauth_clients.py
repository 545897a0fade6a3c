"""KIP-368 with real clients: with a 2 s session lifetime, kafka-python and confluent-kafka
re-authenticate on their live connection and keep producing for several lifetimes, without
the broker closing a connection for an expired session."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer

from tests.support.secure_broker import PASSWORDS, TOKENS, SecureBroker, secure_broker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LIFETIME_MS = 2000
#: Producing lasts this many lifetimes (the point of the test is the time passing).
LIFETIMES = 3


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    gateway = {"sasl_session_lifetime_ms": LIFETIME_MS}
    with secure_broker(tmp_path_factory.mktemp("reauth"), gateway=gateway) as running:
        admin = running.https(TOKENS["admin"])
        for topic in ("orders-reauth-kp", "orders-reauth-ck"):
            assert admin.put(f"/topics/{topic}", json={"queues": 1}).status_code == 201
        yield running


def closed_for_expiry(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "SASL state" in r.getMessage()]


def reauthentications(caplog: pytest.LogCaptureFixture) -> int:
    return sum("re-authenticating" in r.getMessage() for r in caplog.records)


def test_kafka_python_reauthenticates(short_sessions: SecureBroker, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ingest_api.kafka.server")
    producer = KafkaProducer(
        bootstrap_servers=short_sessions.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        ssl_cafile=str(short_sessions.ca.ca_file),
    )
    deadline = time.monotonic() + LIFETIMES * LIFETIME_MS / 1000
    sent = 0
    while time.monotonic() < deadline:
        producer.send("orders-reauth-kp", b"m").get(timeout=30)
        sent += 1
        time.sleep(0.2)  # spread the sends over the lifetimes
    producer.close()
    assert sent >= LIFETIMES * 5
    assert closed_for_expiry(caplog) == []
    assert reauthentications(caplog) >= LIFETIMES - 1


def test_confluent_kafka_reauthenticates(
    short_sessions: SecureBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ingest_api.kafka.server")
    producer = Producer(
        {
            "bootstrap.servers": short_sessions.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": PASSWORDS["alice"],
            "ssl.ca.location": str(short_sessions.ca.ca_file),
        }
    )
    reports: list[KafkaError | None] = []
    deadline = time.monotonic() + LIFETIMES * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        producer.produce("orders-reauth-ck", b"m", on_delivery=lambda err, _: reports.append(err))
        producer.poll(0.2)
    assert producer.flush(30) == 0
    assert reports and all(err is None for err in reports)
    assert closed_for_expiry(caplog) == []
    assert reauthentications(caplog) >= LIFETIMES - 1
