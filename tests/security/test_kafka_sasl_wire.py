"""The SASL listener at the byte level, with raw sockets for what real clients never send:
requests before login, an oversized pre-login frame, broken SCRAM messages, a wrong nonce,
out-of-order SASL frames, re-authentication (KIP-368) and an expired session."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker.security import ScramClient, ScramMechanism, format_plain
from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.sasl import MAX_PRE_AUTH_FRAME_BYTES
from ingest_api.kafka.sasl_session import MECHANISMS, failure_text
from tests.kafka.rawclient import SIZE, RawClient
from tests.support.secure_broker import PASSWORDS, SecureBroker, secure_broker

LIFETIME_MS = 1500


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    gateway = {"sasl_session_lifetime_ms": LIFETIME_MS, "failed_auth_delay_ms": 100}
    with secure_broker(tmp_path_factory.mktemp("sasl-wire"), tls=False, gateway=gateway) as running:
        yield running


@pytest.fixture
def raw(secured: SecureBroker) -> Iterator[RawClient]:
    client = RawClient(secured.kafka_port)
    yield client
    client.close()


def handshake(client: RawClient, mechanism: str, version: int = 1) -> Any:
    return client.call(SaslHandshakeRequest, SaslHandshakeResponse, version, mechanism=mechanism)


def authenticate(client: RawClient, token: bytes, version: int = 1) -> Any:
    return client.call(SaslAuthenticateRequest, SaslAuthenticateResponse, version, auth_bytes=token)


def scram_login(client: RawClient, mechanism: str, user: str, password: str) -> Any:
    """A full SCRAM exchange; returns the last SaslAuthenticate answer."""
    assert handshake(client, mechanism).error_code == 0
    scram = ScramClient(ScramMechanism(mechanism), user, password)
    first = authenticate(client, scram.client_first())
    if first.error_code:
        return first
    final = authenticate(client, scram.handle_server_first(first.auth_bytes))
    if final.error_code == 0:
        scram.handle_server_final(final.auth_bytes)  # the broker proved it holds the keys
    return final


def metadata_works(client: RawClient) -> bool:
    answer = client.call(MetadataRequest, MetadataResponse, 8, topics=None, allow_auto_topic_creation=False)
    return bool(answer.brokers)


def test_api_versions_lists_the_sasl_apis(raw: RawClient) -> None:
    answer = raw.call(
        ApiVersionsRequest, ApiVersionsResponse, 3, client_software_name="raw", client_software_version="1"
    )
    listed = {entry.api_key: (entry.min_version, entry.max_version) for entry in answer.api_keys}
    assert listed[17] == (0, 1) and listed[36] == (0, 2)


def test_requests_before_login_get_no_answer(secured: SecureBroker, raw: RawClient) -> None:
    raw.send(MetadataRequest, 8, topics=None, allow_auto_topic_creation=False)
    assert raw.recv_frame() is None  # closed, nothing answered
    with RawClient(secured.kafka_port) as again:
        assert scram_login(again, "SCRAM-SHA-256", "alice", PASSWORDS["alice"]).error_code == 0
        assert metadata_works(again)


def test_a_large_frame_before_login_closes_the_connection(raw: RawClient) -> None:
    raw.send_raw(SIZE.pack(1 << 20) + b"\x00" * 4096)  # announces 1 MiB; the rest never needed
    assert MAX_PRE_AUTH_FRAME_BYTES < 1 << 20
    assert raw.recv_frame() is None


def test_an_unknown_mechanism_gets_33_and_the_list(raw: RawClient) -> None:
    answer = handshake(raw, "GSSAPI")
    assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert list(answer.mechanisms) == list(MECHANISMS)
    assert raw.closed_by_peer()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_reads_like_a_wrong_password(secured: SecureBroker, mechanism: str) -> None:
    answers = []
    for user, password in (("alice", "wrong-password-1"), ("nobody", "wrong-password-1")):
        with RawClient(secured.kafka_port) as client:
            started = time.monotonic()
            if mechanism == "PLAIN":
                assert handshake(client, mechanism).error_code == 0
                answer = authenticate(client, format_plain(user, password, user))
            else:
                answer = scram_login(client, mechanism, user, password)
            assert time.monotonic() - started >= 0.09  # the failed-login delay
            answers.append((answer.error_code, answer.error_message, bytes(answer.auth_bytes)))
            assert client.closed_by_peer()
    assert answers[0] == answers[1] == (ErrorCode.SASL_AUTHENTICATION_FAILED, failure_text(mechanism), b"")


BROKEN_FIRSTS = [
    b"n=alice,r=abc",  # no gs2 header
    b"p=tls-unique,,n=alice,r=abc",  # channel binding asked for
    b"y,,n=alice,r=abc",  # 'y' flag is not accepted either
    b"n,a=bob,n=alice,r=abc",  # authzid differs from the user
    b"n,,n=al=ice,r=abc",  # a raw '=' in a saslname
    b"n,,n=alice",  # no nonce
    b"\xff\xfe",  # not UTF-8
]


@pytest.mark.parametrize("first", BROKEN_FIRSTS)
def test_broken_scram_client_first(raw: RawClient, first: bytes) -> None:
    assert handshake(raw, "SCRAM-SHA-256").error_code == 0
    answer = authenticate(raw, first)
    assert (answer.error_code, answer.error_message) == (58, failure_text("SCRAM-SHA-256"))
    assert raw.closed_by_peer()


def test_wrong_nonce_and_bad_base64_in_client_final(secured: SecureBroker) -> None:
    tampers: list[Callable[[bytes], bytes]] = [
        lambda final: final.replace(b",r=", b",r=X", 1),  # a nonce the server did not issue
        lambda final: final.split(b",p=")[0] + b",p=!!not-base64!!",
        lambda final: final.replace(b"c=biws", b"c=eSws", 1),  # binding 'y,,'
    ]
    for tamper in tampers:
        with RawClient(secured.kafka_port) as client:
            assert handshake(client, "SCRAM-SHA-512").error_code == 0
            scram = ScramClient(ScramMechanism.SHA_512, "alice", PASSWORDS["alice"])
            first = authenticate(client, scram.client_first())
            assert first.error_code == 0
            answer = authenticate(client, tamper(scram.handle_server_first(first.auth_bytes)))
            assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert client.closed_by_peer()


def test_sasl_frames_out_of_order(secured: SecureBroker, raw: RawClient) -> None:
    assert handshake(raw, "PLAIN").error_code == 0
    raw.send(MetadataRequest, 8, topics=None, allow_auto_topic_creation=False)  # not SaslAuthenticate
    assert raw.recv_frame() is None
    with RawClient(secured.kafka_port) as client:
        assert handshake(client, "PLAIN").error_code == 0
        assert authenticate(client, format_plain("alice", PASSWORDS["alice"])).error_code == 0
        assert authenticate(client, b"again").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert client.closed_by_peer()


def test_handshake_v0_raw_tokens(secured: SecureBroker, raw: RawClient) -> None:
    assert handshake(raw, "PLAIN", version=0).error_code == 0
    token = format_plain("alice", PASSWORDS["alice"], "alice")
    raw.send_raw(SIZE.pack(len(token)) + token)
    assert raw.recv_frame() == b""  # PLAIN's empty success token
    assert metadata_works(raw)


def test_reauthentication_and_expiry(secured: SecureBroker, raw: RawClient) -> None:
    first = scram_login(raw, "SCRAM-SHA-256", "alice", PASSWORDS["alice"])
    assert (first.error_code, first.session_lifetime_ms) == (0, LIFETIME_MS)
    assert metadata_works(raw)
    again = scram_login(raw, "SCRAM-SHA-256", "alice", PASSWORDS["alice"])  # KIP-368, same socket
    assert (again.error_code, again.session_lifetime_ms) == (0, LIFETIME_MS)
    assert metadata_works(raw)
    assert handshake(raw, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE  # another mechanism
    assert raw.closed_by_peer()
    with RawClient(secured.kafka_port) as other:
        assert scram_login(other, "SCRAM-SHA-512", "alice", PASSWORDS["alice"]).error_code == 0
        assert (
            scram_login(other, "SCRAM-SHA-512", "admin", PASSWORDS["admin"]).error_code == 58
        )  # another user
        assert other.closed_by_peer()
    with RawClient(secured.kafka_port) as lapsing:
        assert scram_login(lapsing, "SCRAM-SHA-512", "bob", PASSWORDS["bob"]).error_code == 0
        time.sleep(LIFETIME_MS / 1000 + 0.3)  # the session's end is the point of the test
        lapsing.send(MetadataRequest, 8, topics=None, allow_auto_topic_creation=False)
        assert lapsing.recv_frame() is None
