"""The security model's faults, rooted in :class:`store.SparkMQError`.

No message here ever carries a secret: not a password, token, salted key, nonce-bound proof
or the bytes of a SASL token. Messages name the *field* that is wrong, never its value (a
user name is not a secret and may appear). Every authentication failure a client can cause
with a valid message but wrong credentials is one :class:`AuthenticationFailed` with one
generic text, so that an unknown user reads exactly like a wrong password.
"""

from __future__ import annotations

from store import InvalidArgument, SparkMQError

#: The one text of a credentials failure (Kafka's wording), for every mechanism and cause.
GENERIC_FAILURE = "Authentication failed: invalid credentials"


class SecurityError(SparkMQError):
    """Root of the security model's faults."""

    code = "security_error"


class AuthenticationFailed(SecurityError):
    """Wrong password, wrong token, unknown user, bad proof: always the same message."""

    code = "authentication_failed"

    def __init__(self, message: str = GENERIC_FAILURE) -> None:
        super().__init__(message)


class MalformedSaslMessage(AuthenticationFailed):
    """A SASL message that breaks its mechanism's grammar (RFC 5802 / RFC 4616).

    The message says which rule was broken, never the bytes. On the wire it is answered like
    any failed login (SASL_AUTHENTICATION_FAILED with the generic text).
    """

    code = "sasl_malformed"

    def __init__(self, message: str) -> None:
        SparkMQError.__init__(self, message)


class IllegalSaslState(SecurityError):
    """A SASL step called out of order (e.g. client-final before client-first)."""

    code = "sasl_illegal_state"


class InvalidUsersFile(InvalidArgument, SecurityError):
    """The users file cannot be read or breaks its schema; the message names the field."""

    code = "invalid_users_file"


class MalformedAuthorization(AuthenticationFailed):
    """A RocketMQ 5 gRPC ``authorization`` value that breaks its grammar
    (:mod:`broker.security.grpc_signature`); the message names the rule, never the value."""

    code = "malformed_authorization"

    def __init__(self, message: str) -> None:
        SparkMQError.__init__(self, message)
