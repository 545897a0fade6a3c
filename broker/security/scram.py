"""SCRAM-SHA-256 and SCRAM-SHA-512 exchanges as pure state machines (RFC 5802, RFC 7677).

The server follows Kafka's ``ScramSaslServer``, with two steps beyond it::

    ScramServer                        client
      RECEIVE_CLIENT_FIRST  <-- client-first   (n,,n=user,r=cnonce)
      --> server-first                          (r=cnonce+snonce,s=salt,i=iterations)
      RECEIVE_CLIENT_FINAL  <-- client-final   (c=biws,r=cnonce+snonce,p=proof)
      --> server-final                          (v=signature)
      COMPLETE  (or FAILED after any exception)

* An unknown user is not refused at client-first: the server answers with a mock salt and
  iteration count derived from the name (:func:`~broker.security.scram_format.mock_credential`),
  and fails at client-final with the same :class:`AuthenticationFailed` as a wrong password.
* The proof is checked in constant time (``hmac.compare_digest`` of the StoredKeys).

No I/O and no clock: the caller moves bytes (SaslAuthenticate tokens) in and out. The nonce
source is injectable so golden tests can replay the RFC vector. Each instance serves one
exchange; any exception leaves it FAILED and further calls raise :class:`IllegalSaslState`.
"""

from __future__ import annotations

import base64
import enum
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from broker.security.errors import AuthenticationFailed, IllegalSaslState, MalformedSaslMessage
from broker.security.scram_format import (
    DEFAULT_ITERATIONS,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ClientFirst,
    ScramCredential,
    ScramMechanism,
    client_key,
    credential_from_salted,
    format_client_final,
    format_client_first,
    format_server_first,
    mock_credential,
    parse_client_final,
    parse_client_first,
    parse_server_final,
    parse_server_first,
    salted_password,
    xor,
)

#: ``lookup(username, mechanism)``: the stored credential, or None for an unknown user.
CredentialLookup = Callable[[str, ScramMechanism], ScramCredential | None]


def new_nonce() -> str:
    """24 random bytes as URL-safe base64: printable, no ','."""
    return secrets.token_urlsafe(24)


class ScramState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "receive_client_first"
    RECEIVE_CLIENT_FINAL = "receive_client_final"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class _Pending:
    """What the server remembers between its two steps (no secret beyond the credential)."""

    client_first: ClientFirst
    server_first: str
    nonce: str
    credential: ScramCredential
    known_user: bool


class ScramServer:
    """One server-side SCRAM exchange.

    ``mock_secret`` is the server's secret for unknown users' mock salts: keep it stable
    across restarts (or an observer sees the salt change) and out of logs
    (:func:`~broker.security.secret_file.load_or_create_secret`). ``mock_iterations`` is the
    count unknown users claim: the one real users have (``sparkmq auth add-user`` writes
    :data:`~broker.security.scram_format.DEFAULT_ITERATIONS`).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        mock_secret: bytes,
        *,
        nonce_factory: Callable[[], str] = new_nonce,
        mock_iterations: int = DEFAULT_ITERATIONS,
    ) -> None:
        self.mechanism = mechanism
        self._mock_iterations = mock_iterations
        self._lookup = lookup
        self._mock_secret = mock_secret
        self._nonce_factory = nonce_factory
        self.state = ScramState.RECEIVE_CLIENT_FIRST
        self._pending: _Pending | None = None
        self._username: str | None = None

    def __repr__(self) -> str:
        return f"ScramServer({self.mechanism.value}, state={self.state.value})"

    @property
    def username(self) -> str:
        """The authenticated user; only once COMPLETE."""
        if self.state is not ScramState.COMPLETE or self._username is None:
            raise IllegalSaslState("the SCRAM exchange is not complete")
        return self._username

    def handle_client_first(self, data: bytes) -> bytes:
        """client-first in, server-first out. Raises :class:`MalformedSaslMessage`."""
        self._expect(ScramState.RECEIVE_CLIENT_FIRST)
        try:
            first = parse_client_first(data)
            credential = self._lookup(first.username, self.mechanism)
            known = credential is not None and MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS
            if credential is None or not known:
                credential = mock_credential(
                    self.mechanism, self._mock_secret, first.username, self._mock_iterations
                )
            nonce = first.nonce + self._nonce_factory()
            server_first = format_server_first(nonce, credential.salt, credential.iterations)
        except BaseException:
            self.state = ScramState.FAILED
            raise
        self._pending = _Pending(first, server_first, nonce, credential, known)
        self.state = ScramState.RECEIVE_CLIENT_FINAL
        return server_first.encode()

    def handle_client_final(self, data: bytes) -> bytes:
        """client-final in, server-final out; raises :class:`AuthenticationFailed` (bad proof,
        unknown user) or :class:`MalformedSaslMessage` (grammar, binding, nonce)."""
        self._expect(ScramState.RECEIVE_CLIENT_FINAL)
        pending = self._pending
        assert pending is not None
        self._pending = None
        try:
            signature = self._verify(pending, data)
        except BaseException:
            self.state = ScramState.FAILED
            raise
        self._username = pending.client_first.username
        self.state = ScramState.COMPLETE
        return b"v=" + _b64(signature)

    def _verify(self, pending: _Pending, data: bytes) -> bytes:
        mechanism = self.mechanism
        final = parse_client_final(data, mechanism)
        if final.channel_binding != _b64(pending.client_first.gs2_header.encode()).decode():
            raise MalformedSaslMessage("SCRAM client-final: channel binding does not match the gs2 header")
        if not hmac.compare_digest(final.nonce.encode(), pending.nonce.encode()):
            raise MalformedSaslMessage("SCRAM client-final: nonce does not match the server's")
        auth_message = f"{pending.client_first.bare},{pending.server_first},{final.without_proof}".encode()
        credential = pending.credential
        client_signature = mechanism.hmac(credential.stored_key, auth_message)
        computed_stored_key = mechanism.hash(xor(final.proof, client_signature))
        proof_ok = hmac.compare_digest(computed_stored_key, credential.stored_key)
        if not (proof_ok and pending.known_user):
            raise AuthenticationFailed()
        return mechanism.hmac(credential.server_key, auth_message)

    def _expect(self, state: ScramState) -> None:
        if self.state is not state:
            raise IllegalSaslState(f"SCRAM server is {self.state.value}, not {state.value}")


class ScramClient:
    """One client-side SCRAM exchange (tests and broker-to-broker logins).

    ``client_first()`` -> send; ``handle_server_first(reply)`` -> send; then
    ``handle_server_final(reply)`` checks the server's signature (mutual authentication) and
    raises :class:`AuthenticationFailed` when it does not match or the server sent ``e=``.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        *,
        nonce: str | None = None,
        max_iterations: int = MAX_ITERATIONS,
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = nonce or new_nonce()
        self._max_iterations = max_iterations
        self._client_first_bare = ""
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism.value}, user={self.username!r})"

    def client_first(self) -> bytes:
        message = format_client_first(self.username, self._nonce)
        self._client_first_bare = message[3:]
        return message.encode()

    def handle_server_first(self, data: bytes) -> bytes:
        if not self._client_first_bare:
            raise IllegalSaslState("client_first() was not sent")
        first = parse_server_first(data)
        if not first.nonce.startswith(self._nonce) or first.nonce == self._nonce:
            raise MalformedSaslMessage("SCRAM server-first: nonce does not extend the client's")
        if not MIN_ITERATIONS <= first.iterations <= self._max_iterations:
            raise MalformedSaslMessage("SCRAM server-first: iteration count out of bounds")
        mechanism = self.mechanism
        salted = salted_password(mechanism, self._password, first.salt, first.iterations)
        credential = credential_from_salted(mechanism, salted, first.salt, first.iterations)
        without_proof, _ = format_client_final("n,,", first.nonce, b"")
        auth_message = f"{self._client_first_bare},{first.text},{without_proof}".encode()
        proof = xor(client_key(mechanism, salted), mechanism.hmac(credential.stored_key, auth_message))
        self._server_signature = mechanism.hmac(credential.server_key, auth_message)
        return format_client_final("n,,", first.nonce, proof)[1].encode()

    def handle_server_final(self, data: bytes) -> None:
        if self._server_signature is None:
            raise IllegalSaslState("handle_server_first() did not run")
        signature, error = parse_server_final(data)
        if error is not None or signature is None:
            raise AuthenticationFailed()
        if not hmac.compare_digest(signature, self._server_signature):
            raise AuthenticationFailed("SCRAM server signature does not match: not the real server")


def _b64(data: bytes) -> bytes:
    return base64.b64encode(data)
