"""Golden vectors of RocketMQ's remoting signature (ACL 1.0), made by ali-ons's own signer.

The three requests below were signed once by ali-ons 3.12.0 (``tests/remoting/js``,
``Channel.prototype.beforeRequest`` called on ``RemotingCommand.createRequestCommand(code,
header)`` with ``accessKey`` ``sparkmq-ak-1``, ``secretKey`` ``sparkmq-sk-1``) under node; the
``extFields`` it put on the wire (JSON: numbers and booleans as ali-ons writes them) and the
signatures it computed are pasted here as constants. Each header goes through the door's JSON
header decoder, as a request would, so the values are the strings the broker sees.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker.security.remoting_signature import (
    SIGNATURE,
    UNIQUE_KEY_QUERY,
    UNIQUE_KEY_QUERY_MAX_VERSION,
    sign,
    sign_request,
    signature_matches,
    signed_content,
)
from ingest_api.remoting.codec import decode_json_header

SECRET = b"sparkmq-sk-1"

#: (extFields as ali-ons sent them, body, the Signature ali-ons computed) -- from node, see above.
ALI_ONS_VECTORS: list[tuple[dict[str, Any], bytes | None, str]] = [
    (  # SEND_MESSAGE_V2 (310): the V2 letters, numbers and booleans as JSON scalars, a body
        {"AccessKey": "sparkmq-ak-1", "OnsChannel": "ALIYUN", "a": "PG", "b": "orders", "c": "TBW102",
         "d": 4, "e": 1, "f": 0, "g": 1700000000123, "h": 0, "i": "TAGS\u0001a\u0002", "j": 0,
         "k": False, "m": False},
        b"hello, sparkmq",
        "b3jJpTP9cuKzDHgENWSVxjc2R3o=",
    ),
    (  # GET_ROUTEINFO_BY_TOPIC (105): no body
        {"AccessKey": "sparkmq-ak-1", "OnsChannel": "ALIYUN", "topic": "orders"},
        None,
        "7dtUbCiHCNHc7p16T3d/XyZTmAw=",
    ),
    (  # keys past U+FFFF sort by UTF-16 code unit (U+1F600 before U+FFFD), non-ASCII values
        {"AccessKey": "sparkmq-ak-1", "OnsChannel": "ALIYUN", "\ufffd": "replacement",
         "\U0001f600": "smile", "z\u00e9": "caf\u00e9"},
        bytes([0, 1, 2, 255]),
        "RjXpzq8p6KXLFOzFL0C+DfPPlTA=",
    ),
]  # fmt: skip


def _as_received(ext_fields: dict[str, Any], signature: str) -> dict[str, str]:
    """The extFields the door decodes from ali-ons's JSON header."""
    header = {"code": 310, "extFields": {**ext_fields, SIGNATURE: signature}, "flag": 0, "opaque": 1}
    decoded: dict[str, str] = decode_json_header(json.dumps(header).encode())["ext_fields"]
    return decoded


@pytest.mark.parametrize(("ext_fields", "body", "signature"), ALI_ONS_VECTORS)
def test_our_signature_is_ali_ons_signature(
    ext_fields: dict[str, Any], body: bytes | None, signature: str
) -> None:
    received = _as_received(ext_fields, signature)
    assert sign_request(received, body, SECRET) == signature
    assert signature_matches(received, body, SECRET)


def test_the_signed_content_is_the_sorted_values_then_the_body() -> None:
    fields = {"b": "2", "AccessKey": "AK", "a": "1", SIGNATURE: "ignored"}
    assert signed_content(fields, b"\x00body") == b"AK12\x00body"
    assert signed_content(fields, None) == signed_content(fields, b"") == b"AK12"
    # HmacSHA1("key", "The quick brown fox jumps over the lazy dog"), RFC 2104 style known answer
    known = sign(b"The quick brown fox jumps over the lazy dog", b"key")
    assert known == "3nybhbi3iqa8ino29wqQcBydtNk="


@pytest.mark.parametrize(
    "tamper",
    [
        lambda f, b: (f, b + b"!"),  # the body
        lambda f, b: ({**f, "b": "other-topic"}, b),  # a signed field
        lambda f, b: ({**f, "extra": "x"}, b),  # a field added after signing
        lambda f, b: ({k: v for k, v in f.items() if k != "OnsChannel"}, b),  # one removed
        lambda f, b: ({k: v for k, v in f.items() if k != SIGNATURE}, b),  # no signature at all
        lambda f, b: ({**f, SIGNATURE: f[SIGNATURE].lower()}, b),  # a changed signature
    ],
)
def test_any_change_breaks_the_signature(tamper: Any) -> None:
    ext_fields, body, signature = ALI_ONS_VECTORS[0]
    fields, changed_body = tamper(_as_received(ext_fields, signature), body)
    assert not signature_matches(fields, changed_body, SECRET)


def test_a_wrong_secret_does_not_match() -> None:
    ext_fields, body, signature = ALI_ONS_VECTORS[0]
    assert not signature_matches(_as_received(ext_fields, signature), body, b"sparkmq-sk-2")


def test_old_clients_do_not_sign_the_unique_key_query_flag() -> None:
    fields = {"AccessKey": "AK", "topic": "T", "key": "k", UNIQUE_KEY_QUERY: "true"}
    without = {k: v for k, v in fields.items() if k != UNIQUE_KEY_QUERY}
    assert signed_content(fields, None, UNIQUE_KEY_QUERY_MAX_VERSION) == signed_content(without, None)
    assert signed_content(fields, None, UNIQUE_KEY_QUERY_MAX_VERSION + 1) != signed_content(without, None)


def test_a_lone_surrogate_is_signed_as_java_encodes_it() -> None:
    assert signed_content({"a": "x\ud800y"}, None) == b"x?y"
