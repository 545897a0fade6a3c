"""SASL PLAIN (RFC 4616), checked against the stored SCRAM credential.

The one message, UTF-8::

    message = [authzid] NUL authcid NUL passwd

Kafka's ``PlainSaslServer`` rules: the user (authcid) and password must not be empty, and a
non-empty authzid must equal the user. Each part may be up to :data:`MAX_PART_BYTES` octets
(RFC 4616 asks servers to accept at least 255).

No password is stored, so PLAIN is verified against the user's SCRAM-SHA-256 credential (or
SCRAM-SHA-512 when that is all it has): ``PBKDF2(password, salt, iterations)`` -> ClientKey ->
StoredKey, compared with ``hmac.compare_digest``. An unknown user costs the same PBKDF2 (on a
mock salt) and fails with the same :class:`AuthenticationFailed`. One PBKDF2 per login (a few
milliseconds at 4096 iterations): the door should delay failed logins.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from broker.security.errors import AuthenticationFailed, MalformedSaslMessage
from broker.security.scram import CredentialLookup
from broker.security.scram_format import (
    DEFAULT_ITERATIONS,
    ScramMechanism,
    client_key,
    mock_credential,
    salted_password,
)

#: Longest authzid, user or password accepted, in UTF-8 octets.
MAX_PART_BYTES = 1024
#: Longest PLAIN message: three parts and two NULs.
MAX_MESSAGE_BYTES = 3 * MAX_PART_BYTES + 2
#: The credentials PLAIN checks a password against, in order of preference.
PLAIN_VERIFIERS = (ScramMechanism.SHA_256, ScramMechanism.SHA_512)


@dataclass(frozen=True, slots=True)
class PlainMessage:
    authzid: str
    username: str
    password: str = field(repr=False)


def parse_plain(data: bytes) -> PlainMessage:
    """Split and check a PLAIN message; :class:`MalformedSaslMessage` names the rule, never
    the bytes."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise MalformedSaslMessage(f"SASL PLAIN: message longer than {MAX_MESSAGE_BYTES} bytes")
    parts = data.split(b"\0")
    if len(parts) != 3:
        raise MalformedSaslMessage("SASL PLAIN: expected authzid NUL user NUL password")
    if any(len(part) > MAX_PART_BYTES for part in parts):
        raise MalformedSaslMessage(f"SASL PLAIN: a part is longer than {MAX_PART_BYTES} bytes")
    decoded = [_utf8(part) for part in parts]
    if None in decoded:  # raised outside the except: the error keeps no link to the bytes
        raise MalformedSaslMessage("SASL PLAIN: not UTF-8")
    authzid, username, password = (text or "" for text in decoded)
    if not username or not password:
        raise MalformedSaslMessage("SASL PLAIN: empty user name or password")
    if authzid and authzid != username:
        raise MalformedSaslMessage("SASL PLAIN: authorization id differs from the user name")
    return PlainMessage(authzid, username, password)


def _utf8(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def format_plain(username: str, password: str, authzid: str = "") -> bytes:
    """The message kafka-python and aiokafka send is ``format_plain(u, p, authzid=u)``."""
    return f"{authzid}\0{username}\0{password}".encode()


def verify_password(
    lookup: CredentialLookup,
    mock_secret: bytes,
    username: str,
    password: str,
    mock_iterations: int = DEFAULT_ITERATIONS,
) -> bool:
    """True when ``password`` derives the user's stored SCRAM StoredKey (constant-time). An
    unknown user costs a PBKDF2 of ``mock_iterations`` (give the count real users have)."""
    mechanism, credential = ScramMechanism.SHA_256, None
    for candidate in PLAIN_VERIFIERS:
        credential = lookup(username, candidate)
        if credential is not None:
            mechanism = candidate
            break
    known = credential is not None
    if credential is None:
        credential = mock_credential(mechanism, mock_secret, username, mock_iterations)
    salted = salted_password(mechanism, password, credential.salt, credential.iterations)
    stored_key = mechanism.hash(client_key(mechanism, salted))
    return hmac.compare_digest(stored_key, credential.stored_key) and known


def authenticate_plain(
    lookup: CredentialLookup, mock_secret: bytes, data: bytes, mock_iterations: int = DEFAULT_ITERATIONS
) -> str:
    """The user name a PLAIN message proves; raises :class:`MalformedSaslMessage` or
    :class:`AuthenticationFailed` (the same for an unknown user and a wrong password)."""
    message = parse_plain(data)
    if not verify_password(lookup, mock_secret, message.username, message.password, mock_iterations):
        raise AuthenticationFailed()
    return message.username
