"""How the Spark source and sink reach a secured broker: credentials and the CA, from options.

Options (names case-insensitive), the same for the source and the sink:

* ``token`` (or the former ``authToken``): a bearer token;
* ``tlsCa``: a PEM file of the CA that signs the brokers' HTTPS certificates (an ``https://``
  endpoint; without it the system's CAs are used);
* Kafka's, for jobs moved from ``format("kafka")``: ``kafka.security.protocol``
  (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT``, ``SASL_SSL``), ``kafka.sasl.mechanism``
  (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``) and ``kafka.sasl.jaas.config``
  (``...LoginModule required username="u" password="p";``) map onto HTTP Basic with that user
  and password: the broker checks it against the same stored SCRAM credential its Kafka door
  uses, so one user works on both doors. ``kafka.ssl.truststore.location`` with
  ``kafka.ssl.truststore.type=PEM`` means ``tlsCa``. ``SSL``/``SASL_SSL`` need an ``https``
  endpoint.

The result is one ``auth`` string (a bearer token, or ``Basic <base64>``: see
:func:`authorization_value`) and one CA path, carried in the options; secrets never appear in
a ``repr`` or an error message. Pure except :func:`ssl_context` (reads the CA file).
"""

from __future__ import annotations

import base64
import re
import ssl
from collections.abc import Mapping

from store import InvalidArgument

#: The option names this module reads (lower case).
ACCESS_OPTIONS = frozenset(
    {
        "token",
        "authtoken",
        "tlsca",
        "kafka.security.protocol",
        "kafka.sasl.mechanism",
        "kafka.sasl.jaas.config",
        "kafka.ssl.truststore.location",
        "kafka.ssl.truststore.type",
    }
)
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_FIELD = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')


class InvalidAccessOption(InvalidArgument):
    """A credential or TLS option that cannot be used; ``option`` names it as the user spelled
    it (the message never quotes a secret)."""

    def __init__(self, option: str, reason: str) -> None:
        super().__init__(f"option {option!r}: {reason}")
        self.option, self.reason = option, reason


def parse_access(lower: Mapping[str, str], endpoint: str | None) -> tuple[str | None, str | None]:
    """``(auth, tls_ca)`` from the options (see the module docstring)."""
    token = lower.get("token") or lower.get("authtoken") or None
    protocol = lower.get("kafka.security.protocol", "").strip().upper()
    if protocol and protocol not in _PROTOCOLS:
        raise InvalidAccessOption("kafka.security.protocol", f"must be one of {', '.join(_PROTOCOLS)}")
    tls_ca = lower.get("tlsca") or _pem_truststore(lower)
    if protocol.endswith("SSL") and (endpoint is None or not endpoint.startswith("https://")):
        raise InvalidAccessOption("kafka.security.protocol", f"{protocol} needs an https:// endpoint")
    if tls_ca is not None and endpoint is not None and not endpoint.startswith("https://"):
        raise InvalidAccessOption("tlsCa", "needs an https:// endpoint")
    if protocol.startswith("SASL"):
        if token is not None:
            raise InvalidAccessOption("token", f"give a token or {protocol} credentials, not both")
        return _sasl_basic(lower), tls_ca
    if "kafka.sasl.jaas.config" in lower:
        raise InvalidAccessOption("kafka.sasl.jaas.config", "needs a SASL kafka.security.protocol")
    return token, tls_ca


def _pem_truststore(lower: Mapping[str, str]) -> str | None:
    location = lower.get("kafka.ssl.truststore.location")
    if location is None:
        return None
    if lower.get("kafka.ssl.truststore.type", "").upper() != "PEM":
        raise InvalidAccessOption(
            "kafka.ssl.truststore.location", "only PEM truststores (kafka.ssl.truststore.type=PEM), or tlsCa"
        )
    return location


def _sasl_basic(lower: Mapping[str, str]) -> str:
    mechanism = lower.get("kafka.sasl.mechanism", "PLAIN").strip().upper()
    if mechanism not in _MECHANISMS:
        raise InvalidAccessOption("kafka.sasl.mechanism", f"must be one of {', '.join(_MECHANISMS)}")
    jaas = lower.get("kafka.sasl.jaas.config", "")
    fields = {name: value.replace('\\"', '"') for name, value in _JAAS_FIELD.findall(jaas)}
    user, password = fields.get("username"), fields.get("password")
    if not user or not password or ":" in user:
        raise InvalidAccessOption(
            "kafka.sasl.jaas.config", 'expected ...LoginModule required username="..." password="...";'
        )
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def authorization_value(auth: str) -> str:
    """The ``Authorization`` header for an ``auth`` option value: ``Basic ...`` as it is, a
    bearer token otherwise."""
    return auth if auth.startswith("Basic ") else f"Bearer {auth}"


def auth_headers(auth: str | None) -> dict[str, str]:
    return {"Authorization": authorization_value(auth)} if auth else {}


def ssl_context(tls_ca: str | None) -> ssl.SSLContext | None:
    """A client context trusting ``tls_ca`` (``None``: the defaults). Every certificate in the
    file is a trust anchor, a leaf or an intermediate too (``VERIFY_X509_PARTIAL_CHAIN``, Python
    3.13's default): a broker's own certificate file pins that broker. Host names are checked."""
    if tls_ca is None:
        return None
    context = ssl.create_default_context(cafile=tls_ca)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    return context
