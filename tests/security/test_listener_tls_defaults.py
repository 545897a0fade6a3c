"""What TLS on the listeners implies for a broker's own addresses and its peer calls: a lone
HTTPS broker describes itself with ``https://``; ``peer_ca`` falls back on ``--tls-ca``."""

from __future__ import annotations

from pathlib import Path

from broker.config import ServerConfig
from broker.tls import TlsConfig
from tests.support.secure_broker import TOKENS, secure_broker
from tests.support.stores import light_config
from tests.support.tls import TestCA


def test_a_lone_https_broker_describes_itself_with_https(tmp_path: Path) -> None:
    with secure_broker(tmp_path) as secured:
        (me,) = secured.https(TOKENS["admin"]).get("/cluster").json()["brokers"]
        assert me["http"] == f"https://127.0.0.1:{secured.running.port}"


def test_peer_calls_verify_with_the_listeners_ca_unless_told_otherwise(tmp_path: Path) -> None:
    ca, other = TestCA(tmp_path / "tls"), TestCA(tmp_path / "other", "other")
    leaf = ca.issue("broker")
    store = light_config(tmp_path / "store")
    plain = ServerConfig(store=store).validate()
    assert plain.peer_ca is None  # the system CAs
    without_ca = plain.with_changes(tls=TlsConfig(leaf.cert, leaf.key))
    assert without_ca.peer_ca is None
    with_ca = plain.with_changes(tls=TlsConfig(leaf.cert, leaf.key, ca.ca_file))
    assert with_ca.peer_ca == ca.ca_file
    assert with_ca.with_changes(peer_tls_ca=other.ca_file).peer_ca == other.ca_file
