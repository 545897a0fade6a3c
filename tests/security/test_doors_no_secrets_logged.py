"""No secret reaches the broker's logs at any level: every logger at DEBUG (the broker's,
uvicorn, asyncio, and the clients' own) while clients log in over both doors with right and
wrong credentials; then every broker-side record is searched for each token, password, Basic
header, PLAIN message and SCRAM proof, as text, base64 and hex."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from kafka import KafkaProducer

from broker.security import ScramClient, ScramMechanism, format_plain
from tests.kafka.rawclient import RawClient
from tests.security.test_kafka_sasl_wire import authenticate, handshake
from tests.support.secure_broker import PASSWORDS, TOKENS, SecureBroker, secure_broker

pytestmark = pytest.mark.kafka

LOGGERS = ("", "broker", "ingest_api", "store", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx",
           "httpcore", "kafka", "aiokafka", "asyncio")  # fmt: skip


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> Iterator[Callable[[], pytest.LogCaptureFixture]]:
    """``enable()`` puts every logger at DEBUG into ``caplog`` (call it once the broker runs:
    uvicorn sets its own levels at start)."""
    saved: list[tuple[logging.Logger, int]] = []

    def enable() -> pytest.LogCaptureFixture:
        for name in LOGGERS:
            logger = logging.getLogger(name)
            saved.append((logger, logger.level))
            logger.setLevel(logging.DEBUG)
            if name and caplog.handler not in logger.handlers:
                logger.addHandler(caplog.handler)  # uvicorn's loggers do not propagate
        caplog.handler.setLevel(logging.DEBUG)
        return caplog

    yield enable
    for logger, level in saved:
        logger.setLevel(level)
        if caplog.handler in logger.handlers and logger.name != "root":
            logger.removeHandler(caplog.handler)


def forms(secret: bytes) -> list[str]:
    return [secret.decode("latin-1"), base64.b64encode(secret).decode(), secret.hex()]


def raw_scram_proofs(secured: SecureBroker) -> list[bytes]:
    """A SCRAM-SHA-256 login over a raw (TLS) socket; returns the proof and signature sent."""
    with RawClient(secured.kafka_port, context=secured.client_context()) as client:
        assert handshake(client, "SCRAM-SHA-256").error_code == 0
        scram = ScramClient(ScramMechanism.SHA_256, "alice", PASSWORDS["alice"])
        first = authenticate(client, scram.client_first())
        final = scram.handle_server_first(first.auth_bytes)
        answer = authenticate(client, final)
        assert answer.error_code == 0
        return [final.split(b",p=")[1], bytes(answer.auth_bytes)[2:]]


def drive_every_door(secured: SecureBroker) -> list[bytes]:
    secrets = [p.encode() for p in PASSWORDS.values()] + [t.encode() for t in TOKENS.values()]
    admin = secured.https(TOKENS["admin"])
    assert admin.put("/topics/orders-log", json={"queues": 1}).status_code == 201
    assert secured.https(auth=("alice", PASSWORDS["alice"])).get("/topics").status_code == 200
    assert secured.https(auth=("alice", PASSWORDS["bob"])).get("/topics").status_code == 401
    assert secured.https(PASSWORDS["admin"]).get("/topics").status_code == 401  # a password as a token
    secrets += [f"alice:{PASSWORDS['alice']}".encode(), f"alice:{PASSWORDS['bob']}".encode()]
    for mechanism in ("PLAIN", "SCRAM-SHA-512"):
        producer = KafkaProducer(
            bootstrap_servers=secured.bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=PASSWORDS["alice"],
            ssl_cafile=str(secured.ca.ca_file),
        )
        producer.send("orders-log", b"logged?").get(timeout=30)
        producer.close()
    secrets.append(format_plain("alice", PASSWORDS["alice"], "alice"))

    async def aio(password: str) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=secured.bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password=password,
            ssl_context=create_ssl_context(cafile=str(secured.ca.ca_file)),
        )
        try:
            await producer.start()
            await producer.send_and_wait("orders-log", b"aio")
        finally:
            await producer.stop()

    asyncio.run(aio(PASSWORDS["alice"]))
    with pytest.raises(Exception):  # noqa: B017 - aiokafka's own error type for a failed login
        asyncio.run(aio(PASSWORDS["bob"]))
    return secrets + raw_scram_proofs(secured)


#: The clients' own loggers: kafka-python logs a PLAIN SaslAuthenticate request, password
#: included, at DEBUG (client side: not the broker's to mend).
CLIENT_LOGGERS = ("kafka", "aiokafka", "httpx", "httpcore")


def is_broker_side(record: logging.LogRecord) -> bool:
    return not any(record.name == name or record.name.startswith(name + ".") for name in CLIENT_LOGGERS)


def test_no_secret_in_any_broker_log(
    tmp_path: Path, debug_logs: Callable[[], pytest.LogCaptureFixture]
) -> None:
    with secure_broker(tmp_path) as secured:
        captured = debug_logs()
        secrets = drive_every_door(secured)
    records = [record for record in captured.records if is_broker_side(record)]
    text = "\n".join(f"{record.name} {record.getMessage()} {record.exc_text or ''}" for record in records)
    assert any(r.levelno == logging.DEBUG for r in records)  # DEBUG was on
    assert any(r.name.startswith("ingest_api.kafka") for r in records)
    for secret in secrets:
        for form in forms(secret):
            assert form not in text, f"a secret leaked into the logs ({len(secret)} bytes)"
