"""One connection's SASL login, as Kafka's ``SaslServerAuthenticator`` runs it. No I/O.

The server (:mod:`ingest_api.kafka.server`) gives each connection of a SASL listener one
:class:`SaslSession` and asks it what to do with every frame (:meth:`SaslSession.classify`)::

    START --ApiVersions--> START          (answered, with 17 and 36 advertised)
    START --SaslHandshake(mech)--> AUTHENTICATE  (v1: tokens in SaslAuthenticate)
                                 \\-> RAW_TOKENS (v0: bare size-prefixed tokens)
    AUTHENTICATE/RAW_TOKENS --token(s)--> AUTHENTICATED   (PLAIN: one, SCRAM: two)
    AUTHENTICATED --SaslHandshake(same mech)--> re-authentication (KIP-368), same user only
    anything else before AUTHENTICATED: the connection closes without an answer

* An unsupported mechanism: UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, then close.
* A failed login (wrong password, unknown user, a malformed SCRAM or PLAIN message, a wrong
  nonce): SASL_AUTHENTICATION_FAILED (58) with one generic text naming only the mechanism,
  then close. The server delays that answer (``failed_auth_delay_ms``).
* SaslAuthenticate on an authenticated connection: ILLEGAL_SASL_STATE (34), then close.
* ``session_lifetime_ms`` (> 0) is answered in SaslAuthenticate v1+; once past it, the next
  request that is not a SaslHandshake closes the connection (:meth:`expired`).

Tokens and passwords never leave this module except into the security primitives; no
exception text carries them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from broker.auth import DoorAuth
from broker.security import (
    AuthenticationFailed,
    IllegalSaslState,
    ScramMechanism,
    ScramServer,
    ScramState,
    authenticate_plain,
)
from ingest_api.kafka import sasl
from ingest_api.kafka.errors import ErrorCode, MalformedFrame

PLAIN = "PLAIN"
#: The enabled mechanisms, in the order SaslHandshake lists them.
MECHANISMS = (PLAIN, ScramMechanism.SHA_256.value, ScramMechanism.SHA_512.value)


def failure_text(mechanism: str) -> str:
    """Kafka's one text for every failed login: nothing about why."""
    return (
        "Authentication failed during authentication due to invalid credentials "
        f"with SASL mechanism {mechanism}"
    )


class Phase(enum.Enum):
    START = "start"
    AUTHENTICATE = "authenticate"  # after SaslHandshake v1
    RAW_TOKENS = "raw_tokens"  # after SaslHandshake v0
    AUTHENTICATED = "authenticated"


@dataclass(frozen=True, slots=True)
class Step:
    """What the server does with a frame: send ``response`` (if any), after the failed-login
    delay when ``failed``, then close when ``close``."""

    response: bytes | None
    close: bool = False
    failed: bool = False


class SaslSession:
    """The SASL state of one connection; ``now_ms`` is a monotonic clock in milliseconds."""

    def __init__(self, auth: DoorAuth, session_lifetime_ms: int, now_ms: Callable[[], int]) -> None:
        self._auth = auth
        self._lifetime_ms = session_lifetime_ms
        self._now_ms = now_ms
        self.phase = Phase.START
        self.user: str | None = None
        self.mechanism: str | None = None
        self._reauth = False
        self._scram: ScramServer | None = None
        self._expires_ms: int | None = None

    def __repr__(self) -> str:
        return f"SaslSession({self.phase.value}, user={self.user!r}, mechanism={self.mechanism})"

    @property
    def authenticated(self) -> bool:
        """Logged in (also while a re-authentication is under way)."""
        return self.user is not None

    @property
    def in_exchange(self) -> bool:
        """Waiting for a SaslAuthenticate (or a bare token)."""
        return self.phase in (Phase.AUTHENTICATE, Phase.RAW_TOKENS)

    def expired(self) -> bool:
        return self._expires_ms is not None and self._now_ms() >= self._expires_ms

    def handshake(self, frame: bytes) -> Step:
        """A SaslHandshake request; raises :class:`MalformedFrame`."""
        request = sasl.decode_sasl_handshake_request(frame)
        if self.in_exchange:
            return _handshake_answer(request, ErrorCode.ILLEGAL_SASL_STATE)
        if request.mechanism not in MECHANISMS:
            return _handshake_answer(request, ErrorCode.UNSUPPORTED_SASL_MECHANISM)
        if self.authenticated and request.mechanism != self.mechanism:  # KIP-368: same mechanism
            return _handshake_answer(request, ErrorCode.ILLEGAL_SASL_STATE)
        self._reauth = self.authenticated
        self.mechanism = request.mechanism
        self.phase = Phase.AUTHENTICATE if request.api_version >= 1 else Phase.RAW_TOKENS
        if request.mechanism != PLAIN:
            table = self._auth.table
            self._scram = ScramServer(
                ScramMechanism(request.mechanism), table.scram_credential, self._auth.mock_secret
            )
        return _handshake_answer(request, ErrorCode.NONE)

    def authenticate(self, frame: bytes) -> Step:
        """A SaslAuthenticate request (may run a PBKDF2: call it off the event loop)."""
        request = sasl.decode_sasl_authenticate_request(frame)
        if self.phase is not Phase.AUTHENTICATE:
            return self._answer(
                request, ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate is not expected now", b"", close=True
            )
        try:
            token, done = self._consume(request.auth_bytes)
        except AuthenticationFailed:
            return self._answer(
                request,
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                failure_text(self.mechanism or ""),
                b"",
                close=True,
                failed=True,
            )
        return self._answer(request, ErrorCode.NONE, None, token, close=False, done=done)

    def raw_token(self, frame: bytes) -> Step:
        """A bare token after SaslHandshake v0; a failure closes without an answer."""
        try:
            token, _ = self._consume(frame)
        except AuthenticationFailed:
            return Step(None, close=True, failed=True)
        return Step(sasl.encode_raw_token(token))

    def _consume(self, token: bytes) -> tuple[bytes, bool]:
        """One token of the exchange -> (the answer token, whether the login completed)."""
        table = self._auth.table
        try:
            if self._scram is None:
                user = authenticate_plain(table.scram_credential, self._auth.mock_secret, token)
                return b"", self._complete(user)
            if self._scram.state is ScramState.RECEIVE_CLIENT_FIRST:
                return self._scram.handle_client_first(token), False
            answer = self._scram.handle_client_final(token)
            return answer, self._complete(self._scram.username)
        except (AuthenticationFailed, IllegalSaslState):
            pass
        self._scram = None  # raised outside the except: the error keeps no link to the token
        raise AuthenticationFailed()

    def _complete(self, user: str) -> bool:
        if self._reauth and user != self.user:  # KIP-368: a connection keeps its principal
            raise AuthenticationFailed()
        self.user, self.phase, self._scram, self._reauth = user, Phase.AUTHENTICATED, None, False
        self._expires_ms = self._now_ms() + self._lifetime_ms if self._lifetime_ms > 0 else None
        return True

    def _answer(
        self,
        request: sasl.SaslAuthenticateRequest,
        code: int,
        message: str | None,
        token: bytes,
        *,
        close: bool,
        failed: bool = False,
        done: bool = False,
    ) -> Step:
        lifetime = self._lifetime_ms if done and self._lifetime_ms > 0 else 0
        response = sasl.SaslAuthenticateResponse(
            request.api_version, request.correlation_id, code, message, token, lifetime
        )
        return Step(sasl.encode_sasl_authenticate_response(response), close=close, failed=failed)


def _handshake_answer(request: sasl.SaslHandshakeRequest, code: ErrorCode) -> Step:
    """The SaslHandshake answer (the enabled mechanisms); any error closes the connection."""
    answer = sasl.encode_sasl_handshake_response(request.correlation_id, code, list(MECHANISMS))
    return Step(answer, close=code != ErrorCode.NONE)


__all__ = ["MECHANISMS", "MalformedFrame", "Phase", "SaslSession", "Step", "failure_text"]
