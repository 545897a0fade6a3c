"""RocketMQ's remoting request signature (ACL 1.0, still what ACL 2.0 checks on remoting).

A client holding an access key and its secret key (Java ``AclClientRPCHook``, ali-ons
``Channel.beforeRequest``) adds ``AccessKey`` to the request's ``extFields``, then signs::

    content   = value(k1) + value(k2) + ... + value(kn)      keys sorted, "Signature" left out
                (UTF-8 of the concatenation)  ++  body bytes  (nothing when there is no body)
    Signature = base64( HmacSHA1(key = UTF-8(secret key), data = content) )

The keys are every ``extFields`` key the request carries (``AccessKey`` included; ali-ons also
adds ``OnsChannel``, the Java client an optional ``SecurityToken``), sorted as Java's
``TreeMap`` / JavaScript's ``Array.sort`` sort strings: by UTF-16 code unit, which differs
from Python's code point order only past U+FFFF. Only the values are concatenated, with no
separator (``AclUtils.combineRequestContent``). One quirk is kept from the broker
(``PlainAccessResource.parse``, ``DefaultAuthenticationContextBuilder``): a request whose header
``version`` is RocketMQ 4.9.3 or older (:data:`UNIQUE_KEY_QUERY_MAX_VERSION`) does not sign
``_UNIQUE_KEY_QUERY``, which those clients add after signing.

The server recomputes the signature from the **stored** secret key (HMAC verification needs
the key itself, as RocketMQ's ``plain_acl.yml``) and compares in constant time
(:func:`hmac.compare_digest`; RocketMQ's ``MessageDigest.isEqual``). Pure functions: no I/O,
no logging; neither the secret nor a signature appears in any exception.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from typing import Final

#: ``SessionCredentials.ACCESS_KEY``: the extFields key of the access key.
ACCESS_KEY: Final = "AccessKey"
#: ``SessionCredentials.SIGNATURE``: the extFields key of the signature (never signed itself).
SIGNATURE: Final = "Signature"
#: ``SessionCredentials.SECURITY_TOKEN``: optional, signed like any other field.
SECURITY_TOKEN: Final = "SecurityToken"
#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``: unsigned by clients up to :data:`UNIQUE_KEY_QUERY_MAX_VERSION`.
UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"
#: ``MQVersion.Version.V4_9_3.ordinal()``: the header ``version`` of RocketMQ 4.9.3.
UNIQUE_KEY_QUERY_MAX_VERSION: Final = 399


def _java_order(key: str) -> bytes:
    """Sort key of Java's ``String.compareTo`` (UTF-16 code units, compared unsigned)."""
    return key.encode("utf-16-be", "surrogatepass")


def signed_content(ext_fields: Mapping[str, str], body: bytes | None, version: int | None = None) -> bytes:
    """The bytes a request's signature covers (see the module docstring).

    ``version`` is the request header's ``version`` (``None``: a current client). A value that
    is not valid UTF-16 (a lone surrogate from a JSON ``\\ud800`` escape) is encoded as Java
    does, with ``?`` in its place."""
    skip_unique_key_query = version is not None and version <= UNIQUE_KEY_QUERY_MAX_VERSION
    values = "".join(
        ext_fields[key]
        for key in sorted(ext_fields, key=_java_order)
        if key != SIGNATURE and not (skip_unique_key_query and key == UNIQUE_KEY_QUERY)
    )
    return values.encode("utf-8", "replace") + (body or b"")


def sign(content: bytes, secret_key: bytes) -> str:
    """``base64(HmacSHA1(secret_key, content))``: 28 ASCII characters (``AclSigner.calSignature``)."""
    return base64.b64encode(hmac.digest(secret_key, content, hashlib.sha1)).decode("ascii")


def sign_request(
    ext_fields: Mapping[str, str], body: bytes | None, secret_key: bytes, version: int | None = None
) -> str:
    """The signature a client computes for a request (``AccessKey`` must be among ``ext_fields``)."""
    return sign(signed_content(ext_fields, body, version), secret_key)


def signature_matches(
    ext_fields: Mapping[str, str], body: bytes | None, secret_key: bytes, version: int | None = None
) -> bool:
    """Does the request's ``Signature`` field match ``secret_key``? False when it has none.

    The comparison is constant-time in the signature's content (:func:`hmac.compare_digest`)."""
    given = ext_fields.get(SIGNATURE)
    if given is None:
        return False
    expected = sign_request(ext_fields, body, secret_key, version)
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))
