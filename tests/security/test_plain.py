"""SASL PLAIN: Kafka's parsing rules and the check against the stored SCRAM credential."""

from __future__ import annotations

import pytest

from broker.security import (
    GENERIC_FAILURE,
    AuthenticationFailed,
    MalformedSaslMessage,
    ScramCredential,
    ScramMechanism,
    authenticate_plain,
    format_plain,
    make_credential,
    parse_plain,
)
from broker.security.plain import MAX_PART_BYTES

SECRET = b"mock-secret"
CREDENTIALS = {
    ("alice", ScramMechanism.SHA_256): make_credential(ScramMechanism.SHA_256, "wonderland"),
    ("bob", ScramMechanism.SHA_512): make_credential(ScramMechanism.SHA_512, "builder"),
}


def lookup(name: str, mechanism: ScramMechanism) -> ScramCredential | None:
    return CREDENTIALS.get((name, mechanism))


def test_the_message_kafka_clients_send() -> None:
    # kafka-python and aiokafka send user NUL user NUL password; librdkafka leaves authzid empty.
    assert format_plain("alice", "wonderland", authzid="alice") == b"alice\0alice\0wonderland"
    assert authenticate_plain(lookup, SECRET, b"alice\0alice\0wonderland") == "alice"
    assert authenticate_plain(lookup, SECRET, b"\0alice\0wonderland") == "alice"


def test_verified_against_sha512_when_that_is_all_the_user_has() -> None:
    assert authenticate_plain(lookup, SECRET, format_plain("bob", "builder")) == "bob"


def test_wrong_password_and_unknown_user_fail_alike() -> None:
    messages = []
    for data in (format_plain("alice", "wrong"), format_plain("nobody", "wonderland")):
        with pytest.raises(AuthenticationFailed) as failed:
            authenticate_plain(lookup, SECRET, data)
        assert type(failed.value) is AuthenticationFailed
        messages.append(str(failed.value))
    assert messages == [GENERIC_FAILURE, GENERIC_FAILURE]


@pytest.mark.parametrize(
    ("data", "rule"),
    [
        (b"alice\0wonderland", "expected authzid"),
        (b"a\0alice\0wonderland\0", "expected authzid"),
        (b"\0\0wonderland", "empty"),
        (b"\0alice\0", "empty"),
        (b"mallory\0alice\0wonderland", "authorization id"),
        (b"\0al\xffice\0pw", "UTF-8"),
        (b"\0alice\0" + b"p" * (MAX_PART_BYTES + 1), "longer"),
        (b"\0" * 5000, "longer"),
    ],
)
def test_malformed(data: bytes, rule: str) -> None:
    with pytest.raises(MalformedSaslMessage, match=rule):
        authenticate_plain(lookup, SECRET, data)


def test_parts_of_255_octets_are_accepted() -> None:
    name, password = "n" * 255, "p" * 255
    parsed = parse_plain(format_plain(name, password, authzid=name))
    assert (parsed.authzid, parsed.username, parsed.password) == (name, name, password)
    assert password not in repr(parsed)
