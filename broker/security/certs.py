"""A throw-away certificate authority and leaf certificates, for ``sparkmq auth init`` and tests.

Keys are ECDSA P-256, written as unencrypted PKCS#8 PEM (what uvicorn, Python's ``ssl`` and
ZooKeeper's ``PemReader`` all read). A leaf carries its host names and IP addresses as SANs
(clients check the *advertised* host: name every one) and both serverAuth and clientAuth, so
one certificate serves a broker's listeners and its peer calls. This is for trying sparkmq
and for tests; production certificates come from the operator's own CA.

Needs ``cryptography`` (a base dependency). Time is injected (``now``), so tests can make
expired and not-yet-valid certificates.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Mode of written private keys.
KEY_FILE_MODE = 0o600
DEFAULT_VALID_DAYS = 365
#: A CA signs certificates and CRLs, nothing else.
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
    key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class CertificateAndKey:
    """PEM bytes of a certificate and its private key (the key is never shown)."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write both files; the key is created 0600 and never exists with wider rights."""
        cert_path.write_bytes(self.cert_pem)
        write_private(key_path, self.key_pem)


def write_private(path: Path, data: bytes) -> None:
    """Create ``path`` with mode 0600 (``FileExistsError`` if it exists) and write ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, KEY_FILE_MODE)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _window(now: datetime | None, valid_days: int, not_before: datetime | None) -> tuple[datetime, datetime]:
    start = not_before or (now or datetime.now(UTC)) - timedelta(minutes=5)
    return start, start + timedelta(days=valid_days)


def make_ca(
    common_name: str = "sparkmq throw-away CA",
    *,
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime | None = None,
) -> CertificateAndKey:
    """A self-signed CA certificate (path length 0: it signs leaves only)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _window(now, valid_days, None)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAndKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def subject_alternative_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    """IP addresses as IPAddress SANs, everything else as DNSName."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def issue_cert(
    ca: CertificateAndKey,
    common_name: str,
    hosts: Sequence[str],
    *,
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime | None = None,
    not_before: datetime | None = None,
) -> CertificateAndKey:
    """A leaf signed by ``ca`` for ``hosts`` (SANs), usable as server and client certificate.

    ``not_before`` with a small ``valid_days`` in the past makes an expired certificate.
    Raises ``ValueError`` when ``hosts`` is empty.
    """
    if not hosts:
        raise ValueError("a leaf certificate needs at least one host name or address")
    ca_cert = ca.certificate
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key made by make_ca")
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _window(now, valid_days, not_before)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(subject_alternative_names(hosts)), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return CertificateAndKey(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
