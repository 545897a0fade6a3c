"""TLS on the broker's listeners: one validated :class:`TlsConfig`, the contexts built from it.

``sparkmq serve --tls-cert FILE --tls-key FILE [--tls-ca FILE] [--tls-require-client-cert]``
makes the HTTP door HTTPS (uvicorn's ``ssl_*`` settings, :meth:`TlsConfig.uvicorn_options`)
and the Kafka listener SSL (``asyncio.start_server(ssl=...)``,
:meth:`TlsConfig.server_context`). TLS 1.2 is the oldest version accepted. With ``--tls-ca``
a client certificate, when one is presented, must chain to that CA; with
``--tls-require-client-cert`` one is required. The files are read when a listener starts
(a replaced certificate serves after a restart).

:func:`is_loopback` is the rule behind "auth on, plaintext, non-loopback: refuse unless
``--allow-plaintext``" (:meth:`broker.config.ServerConfig.validate`).
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import InvalidArgument

#: Oldest protocol version a listener accepts.
MIN_TLS_VERSION = ssl.TLSVersion.TLSv1_2


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address; a wildcard (``0.0.0.0``, ``::``, ``""``) is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class TlsConfig:
    """A listener's certificate, key and optional client CA (all PEM files)."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None
    require_client_cert: bool = False

    def validate(self) -> TlsConfig:
        """Return ``self`` or raise :class:`InvalidArgument` naming the bad field."""
        for name, path in (
            ("tls_cert", self.cert_file),
            ("tls_key", self.key_file),
            ("tls_ca", self.ca_file),
        ):
            if path is not None and not path.is_file():
                raise InvalidArgument(f"invalid TlsConfig: {name} {path} not found")
        if self.require_client_cert and self.ca_file is None:
            raise InvalidArgument(
                "invalid TlsConfig: require_client_cert needs tls_ca (the CA clients chain to)"
            )
        return self

    @property
    def verify_mode(self) -> ssl.VerifyMode:
        if self.require_client_cert:
            return ssl.CERT_REQUIRED
        return ssl.CERT_OPTIONAL if self.ca_file is not None else ssl.CERT_NONE

    def server_context(self) -> ssl.SSLContext:
        """A server context; raises :class:`InvalidArgument` when the files do not load (the
        message names the files, never their contents)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = MIN_TLS_VERSION
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            if self.ca_file is not None:
                context.load_verify_locations(self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or type(exc).__name__
            raise InvalidArgument(
                f"cannot load TLS files {self.cert_file}, {self.key_file}: {reason}"
            ) from None
        context.verify_mode = self.verify_mode
        return context

    def uvicorn_options(self) -> dict[str, Any]:
        """uvicorn.Config's ``ssl_*`` keyword arguments."""
        return {
            "ssl_certfile": str(self.cert_file),
            "ssl_keyfile": str(self.key_file),
            "ssl_ca_certs": None if self.ca_file is None else str(self.ca_file),
            "ssl_cert_reqs": int(self.verify_mode),
        }
