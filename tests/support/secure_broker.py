"""A secured broker for the doors' tests: a users file, a test CA, HTTPS and a SASL Kafka listener.

::

    with secure_broker(tmp_path) as secured:           # TLS on both doors, SASL on Kafka
        secured.https(token=TOKENS["admin"]).get("/topics")
        secured.kafka_port, secured.ca.ca_file

The users (passwords and tokens are test constants, unique strings so a log grep finds them):

* ``admin``: superuser, token and SCRAM-SHA-256/512 password;
* ``alice``: token and password, ``produce``/``consume`` on ``orders*``;
* ``bob``: password only, no rights at all.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from broker.config import ServerConfig
from broker.security import ScramMechanism, User, UserTable, hash_token, make_credential, write_users
from broker.tls import TlsConfig
from ingest_api.kafka import GatewayConfig
from ingest_api.kafka.companion import KafkaCompanion
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.stores import light_config
from tests.support.tls import LeafFiles, TestCA

PASSWORDS = {
    "admin": "adm1n-secret-quux-4711",
    "alice": "al1ce-secret-corge-0815",
    "bob": "b0b-secret-grault-2342",
}
TOKENS = {"admin": "admin-token-garply-93a8c1f0d2", "alice": "alice-token-waldo-51be77aa90"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def scram_of(password: str) -> dict[ScramMechanism, object]:
    return {mechanism: make_credential(mechanism, password) for mechanism in ScramMechanism}


def default_users() -> list[User]:
    """The three users of the module docstring."""
    return [
        User("admin", token_hashes=(hash_token(TOKENS["admin"]),), scram=scram_of(PASSWORDS["admin"]), superuser=True),  # type: ignore[arg-type]  # noqa: E501
        User("alice", token_hashes=(hash_token(TOKENS["alice"]),), scram=scram_of(PASSWORDS["alice"]),  # type: ignore[arg-type]
             produce=("orders*",), consume=("orders*",)),
        User("bob", scram=scram_of(PASSWORDS["bob"])),  # type: ignore[arg-type]
    ]  # fmt: skip


def write_users_file(path: Path, users: list[User]) -> Path:
    write_users(path, UserTable(tuple(users)))
    return path


@dataclass
class SecureBroker:
    running: RunningBroker
    kafka: KafkaCompanion
    ca: TestCA
    leaf: LeafFiles
    users_file: Path
    tls: bool

    @property
    def kafka_port(self) -> int:
        assert self.kafka.gateway is not None
        return self.kafka.gateway.port

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.running.port}"

    def client_context(self) -> ssl.SSLContext:
        return self.ca.client_context()

    def https(
        self, token: str | None = None, headers: dict[str, str] | None = None, **kwargs: object
    ) -> httpx.Client:
        """An httpx client verifying the broker against the test CA (bearer ``token``)."""
        headers = {**({"Authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
        verify: ssl.SSLContext | bool = self.client_context() if self.tls else True
        client = httpx.Client(base_url=self.url, headers=headers, verify=verify, timeout=30.0, **kwargs)  # type: ignore[arg-type]
        self.running.clients.append(client)
        return client

    def set_users(self, users: list[User]) -> None:
        write_users_file(self.users_file, users)


@contextlib.contextmanager
def secure_broker(
    tmp_path: Path,
    *,
    tls: bool = True,
    users: list[User] | None = None,
    gateway: Mapping[str, object] | None = None,
    require_client_cert: bool = False,
) -> Iterator[SecureBroker]:
    """A broker with ``users`` (default: :func:`default_users`), TLS unless ``tls=False``, and
    a Kafka gateway on a free port; stopped at exit."""
    ca = TestCA(tmp_path / "tls")
    leaf = ca.issue("broker")
    users_file = write_users_file(tmp_path / "users.json", users or default_users())
    config = ServerConfig(
        store=light_config(tmp_path / "store", default_queues_per_topic=2),
        auth_file=users_file,
        tls=TlsConfig(leaf.cert, leaf.key, ca.ca_file if require_client_cert else None, require_client_cert)
        if tls
        else None,
    )
    base = GatewayConfig(initial_rebalance_delay_ms=100, coordinator_tick_ms=20, min_session_timeout_ms=500)
    kafka = KafkaCompanion(port=0, config=replace(base, **(gateway or {})))  # type: ignore[arg-type]
    running = start_broker(config, companions=[kafka])
    try:
        yield SecureBroker(running, kafka, ca, leaf, users_file, tls)
    finally:
        running.stop()
