"""Mutual TLS on the replication port: contexts, the peer's identity, and who may replicate.

With :attr:`store.ha.config.HAConfig.tls` set, both ends of every HA connection present a
certificate of the cluster CA (``ssl.CERT_REQUIRED`` on both sides, TLS 1.2 or later):

* the **master** accepts the TCP connection, then runs the TLS handshake in the connection's
  own thread (never in the accept loop) within :attr:`HATls.handshake_timeout_s`. When the
  slave's 16-byte handshake names its ``slaveBrokerId``, the certificate's identity (its
  common name) must be the identity that member registered (``IdentityCheck``: the cluster
  layer answers from ZooKeeper). A missing, foreign-CA, expired or mismatched certificate is
  closed before a single byte of the log is sent;
* the **slave** verifies the master's certificate against the CA and the master's advertised
  HA host (the address it found in ZooKeeper).

A failed handshake is a failed connection like any other (the slave backs off and retries); it
is never read as "the master is gone": only a refused TCP connection is (cluster/replica_group).

TLS sockets have no ``sendmsg`` and may hold decrypted bytes ``select`` cannot see;
:mod:`store.ha.wire` handles both on the slave (one thread per connection). The master reads
and writes each connection from two threads, which one ``SSLSocket`` does not allow:
:mod:`store.ha.tls_channel` keeps its TLS state apart from the socket.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from store.errors import InvalidArgument
from store.ha.errors import HAError

#: ``(member_id, certificate identity) -> allowed``: the cluster's registered members.
IdentityCheck = Callable[[int, str], bool]


class PeerRefused(HAError):
    """A replication peer whose certificate does not name the member it claims to be."""

    code = "ha_peer_refused"


@dataclass(frozen=True)
class HATls:
    """This member's certificate and key, and the cluster CA that signs every member's (PEM)."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    #: Bound on a TLS handshake (a peer that stalls it is closed, its thread freed).
    handshake_timeout_s: float = 10.0

    def validate(self) -> HATls:
        for name in ("cert_file", "key_file", "ca_file"):
            path: Path = getattr(self, name)
            if not path.is_file():
                raise InvalidArgument(f"invalid HATls: {name} {path} is not a file")
        if self.handshake_timeout_s <= 0:
            raise InvalidArgument("invalid HATls: handshake_timeout_s must be > 0")
        return self

    def _context(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        context = ssl.create_default_context(purpose, cafile=str(self.ca_file))
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        context.verify_mode = ssl.CERT_REQUIRED
        return context

    def server_context(self) -> ssl.SSLContext:
        """The master's side: its certificate, and a client certificate of the CA required."""
        return self._context(ssl.Purpose.CLIENT_AUTH)

    def client_context(self) -> ssl.SSLContext:
        """The slave's side: its certificate; the master's verified, host name included."""
        return self._context(ssl.Purpose.SERVER_AUTH)

    def identity(self) -> str:
        """This member's own certificate identity (its common name), as it registers it."""
        return certificate_identity(self.cert_file.read_bytes())


def certificate_identity(pem: bytes) -> str:
    """The common name of a PEM certificate ('' when it has none)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    names = x509.load_pem_x509_certificate(pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def peer_identity(sock: ssl.SSLSocket | ssl.SSLObject) -> str:
    """The common name of the verified peer certificate ('' when it has none)."""
    der = sock.getpeercert(binary_form=True)
    if not der:
        return ""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def check_peer(identity: str, member_id: int, check: IdentityCheck | None) -> None:
    """Raise :class:`PeerRefused` unless ``identity`` may replicate as ``member_id``."""
    if check is not None and not check(member_id, identity):
        raise PeerRefused(
            f"certificate {identity!r} is not the registered identity of member {member_id}: refused"
        )
