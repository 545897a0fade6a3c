"""The RocketMQ 5 gRPC signature: golden values from the official client, parse rules, verify."""

from __future__ import annotations

import pytest

from broker.security.errors import GENERIC_FAILURE, AuthenticationFailed, MalformedAuthorization
from broker.security.grpc_signature import (
    ALGORITHM,
    MAX_AUTHORIZATION_CHARS,
    SIGNATURE_BYTES,
    SignedCredential,
    format_authorization,
    parse_authorization,
    sign,
    verify,
)

# Produced once by the official client's own code (PyPI rocketmq-python-client 5.1.2,
# rocketmq/v5/util/signature.py, in .venv-rocketmq5), on 2026-11-27:
#   cfg = SimpleNamespace(credentials=SimpleNamespace(ak="AKgolden", sk="SKsecret-0123"), namespace="")
#   dict(Signature.metadata(cfg, "host@1@0@abc"))  -> x-mq-date-time, authorization below
#   Signature.sign("SKsecret-0123", "20261127T153000Z"); Signature.sign("", "20261127T153000Z")
GOLDEN_AK = "AKgolden"
GOLDEN_SK = b"SKsecret-0123"
GOLDEN_DATE_TIME = "20261127T152316Z"
GOLDEN_AUTHORIZATION = (
    "MQv2-HMAC-SHA1 Credential=AKgolden, SignedHeaders=x-mq-date-time, "
    "Signature=2914c6848cf47170b0ba8eef05e828ca665fcdf4"
)
GOLDEN_SIGN_1530 = "8ffdcfe6302ebda33daa19661044702ecfa48a7d"
GOLDEN_SIGN_EMPTY_KEY_1530 = "2cecfd64ba2a1727f40fcd0b6e2f511d55ba8af2"


def test_the_official_clients_header_parses_and_verifies() -> None:
    parsed = parse_authorization(GOLDEN_AUTHORIZATION)
    assert parsed == SignedCredential(
        GOLDEN_AK, ("x-mq-date-time",), bytes.fromhex("2914c6848cf47170b0ba8eef05e828ca665fcdf4")
    )
    assert len(parsed.signature) == SIGNATURE_BYTES == 20
    assert verify(parsed, GOLDEN_SK, GOLDEN_DATE_TIME)


def test_sign_and_format_write_the_clients_exact_text() -> None:
    assert sign(GOLDEN_SK, "20261127T153000Z").hex() == GOLDEN_SIGN_1530
    assert sign(b"", "20261127T153000Z").hex() == GOLDEN_SIGN_EMPTY_KEY_1530
    assert format_authorization(GOLDEN_AK, GOLDEN_SK, GOLDEN_DATE_TIME) == GOLDEN_AUTHORIZATION


def test_hex_case_does_not_matter() -> None:
    hex_signature = GOLDEN_AUTHORIZATION.rsplit("=", 1)[1]
    upper = GOLDEN_AUTHORIZATION.replace(hex_signature, hex_signature.upper())
    assert upper != GOLDEN_AUTHORIZATION
    assert verify(parse_authorization(upper), GOLDEN_SK, GOLDEN_DATE_TIME)


@pytest.mark.parametrize(
    ("secret", "date_time"),
    [
        (b"SKsecret-0124", GOLDEN_DATE_TIME),  # another secret
        (GOLDEN_SK, "20261127T152317Z"),  # another date: the signature covers it
        (b"", GOLDEN_DATE_TIME),
    ],
)
def test_another_secret_or_date_does_not_verify(secret: bytes, date_time: str) -> None:
    assert not verify(parse_authorization(GOLDEN_AUTHORIZATION), secret, date_time)


def test_a_short_or_long_signature_does_not_verify() -> None:
    for signature in ("2914c684", "2914c6848cf47170b0ba8eef05e828ca665fcdf400", ""):
        header = f"{ALGORITHM} Credential=AKgolden, Signature={signature}"
        assert not verify(parse_authorization(header), GOLDEN_SK, GOLDEN_DATE_TIME)


def test_the_proxys_lenient_parts() -> None:
    # no SignedHeaders, items in any order and spacing, unknown items ignored, the access key
    # ends at the first '/' (DefaultAuthenticationContextBuilder), an empty access key parses
    parsed = parse_authorization(f"{ALGORITHM} Signature={GOLDEN_SIGN_1530},Credential=AK/2026/x ,Extra=1")
    assert parsed == SignedCredential("AK", (), bytes.fromhex(GOLDEN_SIGN_1530))
    empty = parse_authorization(f"{ALGORITHM} Credential=, SignedHeaders=x-mq-date-time, Signature=")
    assert empty.access_key == "" and empty.signature == b""


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "must be"),
        ("MQv2-HMAC-SHA1", "must be"),
        ("Bearer Credential=AK, Signature=00", "algorithm must be MQv2-HMAC-SHA1"),
        (f"{ALGORITHM} Credential=AK, SignedHeaders, Signature=00", "NAME=VALUE"),
        (f"{ALGORITHM} Credential=AK, SignedHeaders=x-mq-date-time", "needs Credential and Signature"),
        (f"{ALGORITHM} SignedHeaders=x-mq-date-time, Signature=00", "needs Credential and Signature"),
        (f"{ALGORITHM} Credential=AK, Signature=zz-not-hex-secretive", "Signature is not hex"),
        (f"{ALGORITHM} Credential=AK, Signature=abc", "Signature is not hex"),  # odd length
        (f"{ALGORITHM} Credential={'A' * MAX_AUTHORIZATION_CHARS}, Signature=00", "longer than"),
    ],
)
def test_malformed_values_name_the_rule_never_the_value(value: str, rule: str) -> None:
    with pytest.raises(MalformedAuthorization, match=rule) as raised:
        parse_authorization(value)
    assert "secretive" not in str(raised.value) and "AAAA" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__context__ is None
    assert isinstance(raised.value, AuthenticationFailed) and str(raised.value) != GENERIC_FAILURE


def test_the_parsed_credential_hides_its_signature() -> None:
    assert "2914c684" not in repr(parse_authorization(GOLDEN_AUTHORIZATION))
