"""Certificates for TLS tests: a CA, and leaves that are valid, expired, not yet valid, from a
foreign CA, or for the wrong host; written as PEM files, plus SSL contexts and a real
handshake over a loopback socket pair.

Built on :mod:`broker.security.certs` (``cryptography``), the same code ``sparkmq auth init``
runs::

    ca = TestCA(tmp_path)
    good = ca.issue("broker-1")                     # SANs 127.0.0.1 and localhost
    expired = ca.issue("old", expired=True)
    foreign = TestCA(tmp_path, "foreign").issue("broker-1")
    handshake(ca.server_context(good), ca.client_context(), "127.0.0.1")
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from broker.security.certs import issue_cert, make_ca

LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class LeafFiles:
    """A leaf certificate and its key on disk (PEM)."""

    name: str
    cert: Path
    key: Path


class TestCA:
    """A certificate authority whose files live in ``directory`` (``<label>-ca.pem``)."""

    __test__ = False  # not a pytest class

    def __init__(self, directory: Path, label: str = "test") -> None:
        self.directory, self.label = directory, label
        directory.mkdir(parents=True, exist_ok=True)
        self.authority = make_ca(f"sparkmq {label} CA")
        self.ca_file = directory / f"{label}-ca.pem"
        self.ca_file.write_bytes(self.authority.cert_pem)

    def issue(
        self,
        name: str,
        hosts: Sequence[str] = LOOPBACK_HOSTS,
        *,
        expired: bool = False,
        not_yet_valid: bool = False,
    ) -> LeafFiles:
        """A leaf with common name ``name`` for ``hosts``, written as ``<label>-<name>.pem``
        and ``<label>-<name>-key.pem`` (0600)."""
        now = datetime.now(UTC)
        if expired:
            leaf = issue_cert(self.authority, name, hosts, valid_days=1, not_before=now - timedelta(days=3))
        elif not_yet_valid:
            leaf = issue_cert(self.authority, name, hosts, not_before=now + timedelta(days=2))
        else:
            leaf = issue_cert(self.authority, name, hosts)
        files = LeafFiles(
            name, self.directory / f"{self.label}-{name}.pem", self.directory / f"{self.label}-{name}-key.pem"
        )
        files.cert.unlink(missing_ok=True)
        files.key.unlink(missing_ok=True)
        leaf.write(files.cert, files.key)
        return files

    def server_context(self, leaf: LeafFiles, *, require_client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(leaf.cert, leaf.key)
        if require_client_cert:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.ca_file)
        return context

    def client_context(self, leaf: LeafFiles | None = None) -> ssl.SSLContext:
        """Trusts this CA, checks host names; presents ``leaf`` when given (mutual TLS)."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if leaf is not None:
            context.load_cert_chain(leaf.cert, leaf.key)
        return context


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, server_hostname: str, timeout_s: float = 10.0
) -> dict[str, object]:
    """Run a real TLS handshake over a loopback socket pair; return the client's view of the
    server certificate. Raises the client's ``ssl.SSLError`` (or the server's, when only the
    server refuses: a missing or untrusted client certificate)."""
    server_sock, client_sock = socket.socketpair()
    server_sock.settimeout(timeout_s)
    client_sock.settimeout(timeout_s)
    server_error: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(server_sock, server_side=True) as tls:
                tls.recv(1)  # until the client has finished (or closed)
        except (ssl.SSLError, OSError) as exc:
            server_error.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with client.wrap_socket(client_sock, server_hostname=server_hostname) as tls:
            tls.sendall(b"x")
            peer = tls.getpeercert() or {}
    finally:
        thread.join(timeout_s)
    if server_error and isinstance(server_error[0], ssl.SSLError):
        raise server_error[0]
    return dict(peer)
