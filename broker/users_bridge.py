"""The users file seen through the HTTP door's token table (a bridge while the door moves over).

The HTTP door and the console still ask :class:`broker.auth.TokenTable` for a token's holder and
check ``produce``/``consume``/``admin`` globs on a :class:`broker.auth.Principal`. The users
file (:mod:`broker.security.users`) is the one source of users now: :class:`UserTokens` answers
the door's lookups from it, and :func:`legacy_principal` turns a
:class:`broker.security.Principal` (a user, a broker, or a broker forwarding for a user) into
the door's shape, judged on the *effective* user (``Principal.effective``):

* a superuser, and a broker acting on its own, hold every right on ``*``;
* anyone else holds the globs of the users file's shorthands.

Explicit ``rights`` entries (Kafka grants) are not visible through this bridge; the doors'
move to :func:`broker.security.authorize` replaces it.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.auth import Principal as DoorPrincipal
from broker.auth import Right, TokenTable, authenticate
from broker.errors import BrokerError
from broker.peer_identity import ON_BEHALF_OF_HEADER, Authenticate, require_broker, resolve_principal
from broker.security import Principal, User, UserTable
from broker.security.plain import verify_password
from broker.state import Broker

_EVERYTHING: tuple[str, ...] = ("*",)
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
#: Mock salts for unknown Basic users (per process: they only need to be unpredictable).
_MOCK_SECRET = secrets.token_bytes(32)


@dataclass(frozen=True)
class UserTokens(TokenTable):
    """A :class:`TokenTable` whose lookups go to the users file's hashed tokens."""

    users: UserTable = field(default_factory=UserTable)

    @classmethod
    def of(cls, users: UserTable) -> UserTokens:
        return cls(principals=(), users=users)

    def lookup(self, token: str) -> DoorPrincipal | None:
        user = self.users.by_token(token)
        return None if user is None else legacy_principal(user.principal())


def legacy_principal(principal: Principal) -> DoorPrincipal:
    """``principal`` in the door's shape (see the module docstring); ``name`` is the caller's
    as logged (``Broker:b1 for User:alice`` on a forwarded request)."""
    acting = principal.effective
    name = str(principal) if principal.on_behalf_of is not None else principal.name
    if acting.superuser or (principal.is_broker and principal.on_behalf_of is None):
        grants = dict.fromkeys(Right, _EVERYTHING)
        return DoorPrincipal(name=name, token="", grants=grants)
    user_grants: dict[Right, tuple[str, ...]] = dict.fromkeys(Right, ())
    for grant in acting.grants:
        ops = {op.value for op in grant.operations}
        if grant.resource_type.value != "topic" or grant.permission.value != "allow":
            continue
        if "write" in ops:
            user_grants[Right.PRODUCE] += (grant.pattern,)
        if "read" in ops:
            user_grants[Right.CONSUME] += (grant.pattern,)
        if "create" in ops:
            user_grants[Right.ADMIN] += (grant.pattern,)
    return DoorPrincipal(name=name, token="", grants=user_grants)


def caller(broker: Broker, headers: Mapping[str, str]) -> Principal | None:
    """Who sent this request (``None``: auth off), forwarded requests resolved
    (:func:`broker.peer_identity.resolve_principal`). ``x-sparkmq-forwarded`` grants nothing
    (it only narrows a request to this broker's own data; the Python client sends it too), so
    it is not checked here; internal routes check the caller (:func:`internal_caller`)."""
    if broker.users is None:
        return None
    authorization, on_behalf_of = headers.get("authorization"), headers.get(ON_BEHALF_OF_HEADER)
    return resolve_principal(table_authenticator(broker.users), authorization, on_behalf_of)


def door_principal(broker: Broker, headers: Mapping[str, str]) -> DoorPrincipal | None:
    """The HTTP door's principal for a request (see :func:`caller`); 401/403 as it says."""
    if broker.users is None:
        return authenticate(broker.tokens, headers.get("authorization"))
    principal = caller(broker, headers)
    return None if principal is None else legacy_principal(principal)


def internal_caller(broker: Broker, headers: Mapping[str, str], route: str) -> None:
    """401 without a valid credential, 403 for any user: ``route`` is broker to broker."""
    require_broker(caller(broker, headers), route)


def table_authenticator(users: UserTable) -> Authenticate:
    """``Bearer <token>`` or ``Basic base64(user:password)`` (the password checked against the
    user's stored SCRAM keys) against ``users``; 401 for anything else, one message for all."""

    def authenticate(authorization: str | None) -> Principal:
        if not authorization:
            raise BrokerError(401, "unauthorized", "missing credentials", headers=_CHALLENGE)
        scheme, _, credentials = authorization.strip().partition(" ")
        credentials = credentials.strip()
        found = None
        if scheme.lower() == "bearer" and credentials:
            found = users.by_token(credentials)
        elif scheme.lower() == "basic" and credentials:
            found = _basic_user(users, credentials)
        if found is None:
            raise BrokerError(401, "unauthorized", "unknown or malformed credentials", headers=_CHALLENGE)
        return found.principal()

    return authenticate


def _basic_user(users: UserTable, credentials: str) -> User | None:
    """An unknown user costs the same PBKDF2 as a known one."""
    try:
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, colon, password = decoded.partition(":")
    if not colon or not name or not password:
        return None
    if not verify_password(users.scram_credential, _MOCK_SECRET, name, password):
        return None
    return users.user(name)
