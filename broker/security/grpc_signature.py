"""RocketMQ 5's gRPC request signature (``MQv2-HMAC-SHA1``): parse and verify, pure.

Every call of an official RocketMQ 5 client carries two metadata entries (the Python client's
``rocketmq/v5/util/signature.py``, the Java client's ``rpc/Signature.java``)::

    x-mq-date-time: 20261127T152316Z                       yyyyMMdd'T'HHmmss'Z', the signed text
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>
                    '-------------' '-------------------------------------------------------'
                    ALGORITHM       items, ", "-separated, each NAME=VALUE (split at the first =)

    Signature = lowercase hex of HMAC-SHA1(key = utf8(secret key), msg = utf8(x-mq-date-time))
              = 40 hex digits (:data:`SIGNATURE_BYTES` = 20 bytes)

The parse follows the proxy's ``DefaultAuthenticationContextBuilder`` (apache/rocketmq
``auth/.../authentication/builder/``): split at the first space, items at ``,``, each trimmed
and split at the first ``=`` (an item without ``=`` is malformed); ``Credential`` is the access
key up to the first ``/``; ``Signature`` is hex in either case; unknown items are ignored. Two
rules are ours: the algorithm must be :data:`ALGORITHM` (the proxy ignores it and computes
HMAC-SHA1 whatever it says), and ``Credential`` and ``Signature`` must both be present (the
proxy fails later, on the missing user or signature).

The date is not checked against a clock: the Python client formats its *local* time with a
``Z``, so a skew check would refuse every client east or west of UTC (the proxy checks none).
The signature is compared on the decoded bytes with :func:`hmac.compare_digest` (the proxy's
``MessageDigest.isEqual``), so hex case does not matter and the time does not depend on where
the first difference is.

No error message carries the header's value, a signature or a secret.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from broker.security.errors import MalformedAuthorization

#: The metadata key of the signed credential (gRPC metadata keys are lowercase).
AUTHORIZATION_KEY = "authorization"
#: The metadata key of the signed text.
DATE_TIME_KEY = "x-mq-date-time"
#: The one algorithm the clients send.
ALGORITHM = "MQv2-HMAC-SHA1"
CREDENTIAL = "Credential"
SIGNED_HEADERS = "SignedHeaders"
SIGNATURE = "Signature"
#: HMAC-SHA1 output, in bytes (40 hex digits on the wire).
SIGNATURE_BYTES = hashlib.sha1().digest_size
#: Longest ``authorization`` value parsed (the clients send about 120 characters).
MAX_AUTHORIZATION_CHARS = 1024


@dataclass(frozen=True, slots=True)
class SignedCredential:
    """A parsed ``authorization`` value: who claims to call, and their signature (raw bytes)."""

    access_key: str
    signed_headers: tuple[str, ...]
    signature: bytes = field(repr=False)


def parse_authorization(value: str) -> SignedCredential:
    """Parse an ``authorization`` metadata value.

    Raises :class:`MalformedAuthorization` naming the broken rule (never the value): too long,
    no space after the algorithm, another algorithm, an item without ``=``, ``Credential`` or
    ``Signature`` missing, or a signature that is not hex. An empty access key parses (the Python
    client sends ``Credential=`` without credentials); no user has it.
    """
    if len(value) > MAX_AUTHORIZATION_CHARS:
        raise MalformedAuthorization(f"authorization is longer than {MAX_AUTHORIZATION_CHARS} characters")
    algorithm, space, items = value.partition(" ")
    if not space:
        raise MalformedAuthorization(f"authorization must be '{ALGORITHM} {CREDENTIAL}=..., {SIGNATURE}=...'")
    if algorithm != ALGORITHM:
        raise MalformedAuthorization(f"authorization algorithm must be {ALGORITHM}")
    fields: dict[str, str] = {}
    for item in items.split(","):
        name, equals, item_value = item.strip().partition("=")
        if not equals:
            raise MalformedAuthorization("authorization items must be NAME=VALUE")
        fields[name] = item_value
    if CREDENTIAL not in fields or SIGNATURE not in fields:
        raise MalformedAuthorization(f"authorization needs {CREDENTIAL} and {SIGNATURE}")
    try:
        signature = bytes.fromhex(fields[SIGNATURE])
    except ValueError:
        signature = None
    if signature is None:  # raised outside the except: no link to the value
        raise MalformedAuthorization(f"authorization {SIGNATURE} is not hex")
    signed = tuple(h for h in fields.get(SIGNED_HEADERS, "").split(";") if h)
    return SignedCredential(fields[CREDENTIAL].split("/", 1)[0], signed, signature)


def sign(secret_key: bytes, date_time: str) -> bytes:
    """HMAC-SHA1 of ``date_time`` (UTF-8) under ``secret_key``: :data:`SIGNATURE_BYTES` bytes."""
    return hmac.digest(secret_key, date_time.encode("utf-8"), hashlib.sha1)


def format_authorization(access_key: str, secret_key: bytes, date_time: str) -> str:
    """The ``authorization`` value a client sends at ``date_time`` (the clients' exact text)."""
    signature = sign(secret_key, date_time).hex()
    return f"{ALGORITHM} {CREDENTIAL}={access_key}, {SIGNED_HEADERS}={DATE_TIME_KEY}, {SIGNATURE}={signature}"


def verify(credential: SignedCredential, secret_key: bytes, date_time: str) -> bool:
    """Whether ``credential`` signs ``date_time`` under ``secret_key`` (constant-time compare)."""
    return hmac.compare_digest(sign(secret_key, date_time), credential.signature)
