"""The SASL session state machine without sockets: frames in, steps out, a clock the test sets
(the server-level behaviour is in tests/security/test_kafka_sasl_wire.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from broker.auth import DoorAuth
from broker.security import ScramClient, ScramMechanism, User, UsersFile, format_plain
from ingest_api.kafka.errors import ErrorCode, MalformedFrame
from ingest_api.kafka.sasl_session import Phase, SaslSession, Step
from tests.support.secure_broker import PASSWORDS, default_users, write_users_file

LIFETIME_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="module")
def auth(tmp_path_factory: pytest.TempPathFactory) -> DoorAuth:
    users: list[User] = default_users()
    path = write_users_file(tmp_path_factory.mktemp("sasl-session") / "users.json", users)
    return DoorAuth(UsersFile(path), b"m" * 32)


def frame(request_cls: Any, version: int, **fields: Any) -> bytes:
    request = request_cls(version=version, **fields)
    request.with_header(correlation_id=5, client_id="t")
    return bytes(request.encode(header=True, framed=False))


def answer(step: Step, response_cls: Any, version: int) -> Any:
    assert step.response is not None
    return response_cls.decode(step.response[4:], version=version, header=True)


def handshake(session: SaslSession, mechanism: str, version: int = 1) -> Any:
    step = session.handshake(frame(SaslHandshakeRequest, version, mechanism=mechanism))
    return step, answer(step, SaslHandshakeResponse, version)


def authenticate(session: SaslSession, token: bytes, version: int = 2) -> tuple[Step, Any]:
    step = session.authenticate(frame(SaslAuthenticateRequest, version, auth_bytes=token))
    return step, answer(step, SaslAuthenticateResponse, version)


def scram(session: SaslSession, user: str, password: str) -> tuple[Step, Any]:
    client = ScramClient(ScramMechanism.SHA_256, user, password)
    _, first = authenticate(session, client.client_first())
    return authenticate(session, client.handle_server_first(first.auth_bytes))


def test_plain_login_and_the_session_lifetime(auth: DoorAuth) -> None:
    clock = Clock()
    session = SaslSession(auth, LIFETIME_MS, clock)
    step, shook = handshake(session, "PLAIN")
    assert (step.close, shook.error_code, session.phase) == (False, 0, Phase.AUTHENTICATE)
    step, done = authenticate(session, format_plain("alice", PASSWORDS["alice"], "alice"))
    assert (step.close, done.error_code, done.session_lifetime_ms) == (False, 0, LIFETIME_MS)
    assert (session.user, session.authenticated, session.expired()) == ("alice", True, False)
    clock.now += LIFETIME_MS
    assert session.expired()


def test_a_failed_login_is_delayed_and_closes(auth: DoorAuth) -> None:
    session = SaslSession(auth, 0, Clock())
    handshake(session, "SCRAM-SHA-256")
    step, failed = scram(session, "alice", "wrong")
    assert (step.failed, step.close, failed.error_code) == (True, True, ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert session.user is None


def test_reauthentication_keeps_the_user_and_the_mechanism(auth: DoorAuth) -> None:
    clock = Clock()
    session = SaslSession(auth, LIFETIME_MS, clock)
    handshake(session, "SCRAM-SHA-256")
    assert scram(session, "alice", PASSWORDS["alice"])[1].error_code == 0
    clock.now += LIFETIME_MS - 1
    handshake(session, "SCRAM-SHA-256")
    assert session.authenticated  # still logged in while re-authenticating
    assert scram(session, "alice", PASSWORDS["alice"])[1].error_code == 0
    clock.now += LIFETIME_MS - 1
    assert not session.expired()  # the lifetime restarted
    step, other = handshake(session, "PLAIN")
    assert (step.close, other.error_code) == (True, ErrorCode.ILLEGAL_SASL_STATE)
    again = SaslSession(auth, LIFETIME_MS, clock)
    handshake(again, "SCRAM-SHA-256")
    scram(again, "alice", PASSWORDS["alice"])
    handshake(again, "SCRAM-SHA-256")
    step, as_bob = scram(again, "bob", PASSWORDS["bob"])
    assert (step.close, as_bob.error_code, again.user) == (
        True,
        ErrorCode.SASL_AUTHENTICATION_FAILED,
        "alice",
    )


def test_out_of_order_frames(auth: DoorAuth) -> None:
    session = SaslSession(auth, 0, Clock())
    step, early = authenticate(session, b"n,,n=alice,r=x")
    assert (step.close, early.error_code) == (True, ErrorCode.ILLEGAL_SASL_STATE)
    step, unknown = handshake(SaslSession(auth, 0, Clock()), "GSSAPI")
    assert (step.close, unknown.error_code) == (True, ErrorCode.UNSUPPORTED_SASL_MECHANISM)
    with pytest.raises(MalformedFrame):
        session.handshake(b"\x00\x11\x00\x01")


def test_raw_tokens_after_handshake_v0(auth: DoorAuth) -> None:
    session = SaslSession(auth, 0, Clock())
    handshake(session, "PLAIN", version=0)
    assert session.phase is Phase.RAW_TOKENS
    assert session.raw_token(format_plain("bob", PASSWORDS["bob"])) == Step(b"\x00\x00\x00\x00")
    assert session.user == "bob"
    refused = SaslSession(auth, 0, Clock())
    handshake(refused, "PLAIN", version=0)
    assert refused.raw_token(format_plain("bob", "wrong")) == Step(None, close=True, failed=True)
