"""The HTTP door over TLS with the one users model: httpx with the test CA, bearer tokens and
HTTP Basic (a SASL password), 401/403 as before; the plaintext guard of ``ServerConfig``."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from broker.config import ServerConfig
from broker.tls import TlsConfig
from store import InvalidArgument
from tests.kafka.rawclient import RawClient
from tests.security.test_kafka_sasl_wire import handshake
from tests.support.secure_broker import PASSWORDS, TOKENS, SecureBroker, secure_broker
from tests.support.stores import light_config
from tests.support.tls import TestCA


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    with secure_broker(tmp_path_factory.mktemp("https")) as running:
        admin = running.https(TOKENS["admin"])
        assert admin.put("/topics/orders", json={"queues": 1}).status_code == 201
        assert admin.put("/topics/payments", json={"queues": 1}).status_code == 201
        yield running


def test_bearer_over_https(secured: SecureBroker) -> None:
    alice = secured.https(TOKENS["alice"])
    sent = alice.post("/topics/orders/messages", json={"body": "hello"})
    assert sent.status_code == 201, sent.text
    assert alice.post("/topics/payments/messages", json={"body": "x"}).status_code == 403
    assert [t["topic"] for t in alice.get("/topics").json()["topics"]] == ["orders"]
    assert secured.https("wrong-token-0000").get("/topics").status_code == 401
    assert secured.https().get("/healthz").status_code == 200


def test_basic_with_a_sasl_password(secured: SecureBroker) -> None:
    alice = secured.https(auth=("alice", PASSWORDS["alice"]))
    for _ in range(3):  # the first verifies the SCRAM keys, the next come from the cache
        assert alice.post("/topics/orders/messages", json={"body": "b"}).status_code == 201
    assert alice.get("/metrics").status_code == 403
    wrong = secured.https(auth=("alice", "not-her-password"))
    unknown = secured.https(auth=("mallory", "not-her-password"))
    answers = [client.get("/topics") for client in (wrong, unknown)]
    assert [a.status_code for a in answers] == [401, 401]
    assert answers[0].json() == answers[1].json()  # an unknown user reads like a wrong password
    admin = secured.https(auth=("admin", PASSWORDS["admin"]))
    assert admin.get("/metrics").status_code == 200


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_the_broker_certificate_is_verified(secured: SecureBroker, tmp_path: Path) -> None:
    foreign = TestCA(tmp_path, "foreign")
    with httpx.Client(verify=foreign.client_context()) as client, pytest.raises(httpx.ConnectError):
        client.get(f"{secured.url}/healthz")
    with httpx.Client() as client, pytest.raises(httpx.RemoteProtocolError):
        client.get(f"http://127.0.0.1:{secured.running.port}/healthz")  # plain HTTP to the TLS port
    old = ssl.create_default_context(cafile=str(secured.ca.ca_file))
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    with httpx.Client(verify=old) as client, pytest.raises(httpx.ConnectError):
        client.get(f"{secured.url}/healthz")


def test_plaintext_with_auth_off_loopback_is_refused(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text('{"tokens": [{"token": "abcdefgh", "consume": ["*"]}]}')
    base = ServerConfig(store=light_config(tmp_path / "store"), auth_file=users)
    base.validate()  # 127.0.0.1: fine
    with pytest.raises(InvalidArgument, match="clear text"):
        base.with_changes(host="0.0.0.0")
    base.with_changes(host="0.0.0.0", allow_plaintext=True)
    leaf = TestCA(tmp_path / "ca").issue("b")
    base.with_changes(host="0.0.0.0", tls=TlsConfig(leaf.cert, leaf.key))
    ServerConfig(store=light_config(tmp_path / "s2"), host="0.0.0.0").validate()  # auth off: fine
    with pytest.raises(InvalidArgument, match="require_client_cert"):
        TlsConfig(leaf.cert, leaf.key, require_client_cert=True).validate()


def test_serve_refuses_credentials_in_clear_text_off_loopback(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sparkmq.cli.root import app

    users = tmp_path / "users.json"
    users.write_text('{"tokens": [{"token": "abcdefgh", "consume": ["*"]}]}')
    base = ["serve", "--store-dir", str(tmp_path / "store"), "--auth-file", str(users), "--operators", "off"]
    cases = [
        (["--host", "0.0.0.0"], "clear text"),
        (["--kafka-port", "0", "--kafka-host", "0.0.0.0"], "Kafka listener"),
        (["--tls-cert", str(users)], "--tls-cert and --tls-key go together"),
        (["--tls-ca", str(users)], "need --tls-cert and --tls-key"),
    ]
    for extra, message in cases:
        result = CliRunner().invoke(app, [*base, *extra], prog_name="sparkmq", terminal_width=200)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output, (extra, result.output)


def test_required_client_certificates(tmp_path: Path) -> None:
    """--tls-require-client-cert: HTTPS and the Kafka listener refuse a client without a
    certificate from the CA, and serve one with it."""
    with secure_broker(tmp_path, require_client_cert=True) as secured:
        with httpx.Client(verify=secured.client_context()) as anonymous, pytest.raises(httpx.TransportError):
            anonymous.get(f"{secured.url}/healthz")
        client_leaf = secured.ca.issue("a-client")
        with httpx.Client(verify=secured.ca.client_context(client_leaf)) as known:
            assert (
                known.get(
                    f"{secured.url}/topics", headers={"Authorization": f"Bearer {TOKENS['admin']}"}
                ).status_code
                == 200
            )
        try:  # TLS 1.3: the server checks the client's certificate after the client is done
            with RawClient(secured.kafka_port, context=secured.client_context()) as raw:
                raw.send_raw(b"\x00\x00\x00\x00")
                refused = raw.recv_frame() is None
        except (ssl.SSLError, ConnectionError):
            refused = True
        assert refused
        with RawClient(secured.kafka_port, context=secured.ca.client_context(client_leaf)) as raw:
            assert handshake(raw, "PLAIN").error_code == 0
