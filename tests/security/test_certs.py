"""The test certificate helpers (tests/support/tls.py over broker/security/certs.py), checked by
real TLS handshakes: valid, expired, not yet valid, foreign CA, wrong host, mutual TLS."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from broker.security.certs import issue_cert, make_ca
from tests.support.tls import TestCA, handshake


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path)


def test_a_valid_leaf_is_trusted_for_each_san(ca: TestCA) -> None:
    leaf = ca.issue("broker-1", ["127.0.0.1", "localhost", "::1"])
    for host in ("127.0.0.1", "localhost", "::1"):
        peer = handshake(ca.server_context(leaf), ca.client_context(), host)
        assert ("IP Address", "127.0.0.1") in peer["subjectAltName"]  # type: ignore[operator]


@pytest.mark.parametrize("kind", ["expired", "not_yet_valid"])
def test_out_of_date_leaves_are_refused(ca: TestCA, kind: str) -> None:
    leaf = ca.issue(kind, expired=kind == "expired", not_yet_valid=kind == "not_yet_valid")
    with pytest.raises(ssl.SSLCertVerificationError, match=r"expired|not yet valid"):
        handshake(ca.server_context(leaf), ca.client_context(), "127.0.0.1")


def test_a_foreign_ca_is_refused(ca: TestCA, tmp_path: Path) -> None:
    foreign = TestCA(tmp_path, "foreign").issue("broker-1")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(ca.server_context(foreign), ca.client_context(), "127.0.0.1")


def test_a_wrong_host_is_refused(ca: TestCA) -> None:
    leaf = ca.issue("elsewhere", ["elsewhere.test"])
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(ca.server_context(leaf), ca.client_context(), "127.0.0.1")


def test_mutual_tls(ca: TestCA, tmp_path: Path) -> None:
    server_leaf, client_leaf = ca.issue("broker-1"), ca.issue("broker-2")
    server = ca.server_context(server_leaf, require_client_cert=True)
    handshake(server, ca.client_context(client_leaf), "127.0.0.1")
    with pytest.raises(ssl.SSLError):
        handshake(server, ca.client_context(), "127.0.0.1")  # no client certificate
    foreign_client = TestCA(tmp_path, "foreign").issue("broker-2")
    with pytest.raises(ssl.SSLError):
        handshake(server, ca.client_context(foreign_client), "127.0.0.1")


def test_keys_are_private_and_hidden(ca: TestCA) -> None:
    leaf = ca.issue("broker-1")
    assert leaf.key.stat().st_mode & 0o077 == 0
    issued = issue_cert(make_ca(), "x", ["localhost"])
    assert b"PRIVATE KEY" in issued.key_pem and "PRIVATE" not in repr(issued)
    with pytest.raises(ValueError, match="at least one host"):
        issue_cert(make_ca(), "x", [])
