"""The doors' adapter to the security model: who is calling, and may they.

There is one users file and one authorization function (:func:`broker.security.acl.authorize`);
this module only translates what the HTTP door and the console speak into it:

* :class:`DoorAuth` holds the loaded users file (:class:`broker.security.UsersFile`), the
  broker's mock-salt secret, and a short cache of successful HTTP Basic logins. Every door
  reads the *current* table, so a reload applies to the next request.
* :func:`authenticate` turns an ``Authorization`` header into a
  :class:`~broker.security.acl.Principal`: ``Bearer <token>`` (hashed lookup, constant-time
  confirmation) or ``Basic base64(user:password)`` checked against the user's stored SCRAM keys
  (one PBKDF2, the same cost and the same answer for an unknown user). A successful Basic login
  is cached for :data:`BASIC_CACHE_S` seconds under an HMAC of the credentials (never the
  password itself), so PBKDF2 does not run on every request; a reload empties the cache.
* :func:`authorize` keeps the HTTP rights as today's shorthands: ``produce`` = WRITE topic,
  ``consume`` = READ topic, ``admin`` = CREATE topic, the global admin = DESCRIBE cluster.

Missing or bad credentials -> 401 (``WWW-Authenticate: Bearer``); a known caller without the
right -> 403. No message carries a credential.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path

from broker.errors import BrokerError
from broker.peer_identity import ON_BEHALF_OF_HEADER, require_broker, resolve_principal
from broker.security import (
    Operation,
    Principal,
    ReloadOutcome,
    ReloadResult,
    ResourceType,
    UsersFile,
    UserTable,
    authorize_any,
    cluster,
)
from broker.security import authorize as acl_authorize
from broker.security.plain import verify_password

__all__ = [
    "BASIC_CACHE_S",
    "DoorAuth",
    "Principal",
    "Right",
    "authenticate",
    "authorize",
    "authorize_global_admin",
    "is_global_admin",
    "may",
    "may_any",
    "may_produce_somewhere",
]

#: Seconds a verified HTTP Basic credential is remembered (PBKDF2 runs once per this period).
BASIC_CACHE_S = 30.0
#: Most remembered Basic credentials (oldest dropped first).
BASIC_CACHE_ENTRIES = 1024


class Right(enum.Enum):
    """The HTTP door's rights, as the users file's shorthands name them."""

    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"


#: Each HTTP right as the Kafka operation on the topic it needs.
RIGHT_OPERATIONS: dict[Right, Operation] = {
    Right.PRODUCE: Operation.WRITE,
    Right.CONSUME: Operation.READ,
    Right.ADMIN: Operation.CREATE,
}

#: ``on_reload(result)``: called on the reloading thread after a table swap.
ReloadListener = Callable[[ReloadResult], None]


class DoorAuth:
    """The users every door checks, reloadable; thread-safe.

    ``mock_secret`` is the broker's stable secret (``load_or_create_secret``) for unknown
    users' mock salts; ``clock`` is monotonic seconds (tests set it).
    """

    def __init__(
        self, users: UsersFile, mock_secret: bytes, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.users = users
        self.mock_secret = mock_secret
        self._clock = clock
        self._basic: OrderedDict[bytes, tuple[str, float, UserTable]] = OrderedDict()
        self._lock = threading.Lock()
        self._listeners: list[ReloadListener] = []

    def __repr__(self) -> str:
        return f"DoorAuth({self.users.path}, users={len(self.table.users)})"

    @classmethod
    def open(cls, path: Path, secret_path: Path) -> DoorAuth:
        """Load the users file and the mock secret; raises ``InvalidUsersFile`` or
        ``SecurityError`` (neither message carries a secret)."""
        from broker.security import load_or_create_secret

        secret_path.parent.mkdir(parents=True, exist_ok=True)
        return cls(UsersFile(path), load_or_create_secret(secret_path))

    @property
    def table(self) -> UserTable:
        return self.users.table

    def principal(self, name: str) -> Principal | None:
        """The named user's principal in the *current* table (None once removed)."""
        user = self.table.user(name)
        return None if user is None else user.principal()

    def by_token(self, token: str) -> Principal | None:
        user = self.table.by_token(token)
        return None if user is None else user.principal()

    def by_access_key(self, access_key: str) -> tuple[Principal, bytes] | None:
        """The principal holding ``access_key`` and its secret key (UTF-8), for the doors that
        verify RocketMQ's HMAC signatures; None for an unknown key."""
        found = self.table.by_access_key(access_key)
        if found is None:
            return None
        user, key = found
        return user.principal(), key.secret_key.encode("utf-8")

    def by_password(self, name: str, password: str) -> Principal | None:
        """The user when ``password`` matches their stored SCRAM keys (cached briefly)."""
        table = self.table
        key = hmac.digest(self.mock_secret, f"{name}\0{password}".encode(), hashlib.sha256)
        now = self._clock()
        with self._lock:
            cached = self._basic.get(key)
            if cached is not None and cached[1] > now and cached[2] is table:
                return self.principal(cached[0])
        if not verify_password(table.scram_credential, self.mock_secret, name, password):
            return None
        with self._lock:
            self._basic[key] = (name, now + BASIC_CACHE_S, table)
            while len(self._basic) > BASIC_CACHE_ENTRIES:
                self._basic.popitem(last=False)
        return self.principal(name)

    def on_reload(self, listener: ReloadListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: ReloadListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def reload_if_changed(self) -> ReloadResult:
        """Re-read the users file when it changed; listeners hear of every swap."""
        result = self.users.reload_if_changed()
        if result.outcome is ReloadOutcome.RELOADED:
            with self._lock:
                self._basic.clear()
            for listener in list(self._listeners):
                listener(result)
        return result


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _unauthorized(message: str) -> BrokerError:
    return BrokerError(401, "unauthorized", message, headers=_CHALLENGE)


def authenticate(auth: DoorAuth | None, authorization: str | None) -> Principal | None:
    """The caller's principal; ``None`` when auth is off. Raises 401 when it is on and fails."""
    if auth is None:
        return None
    if not authorization:
        raise _unauthorized("missing bearer token")
    scheme, _, credentials = authorization.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "basic" and credentials:
        return _basic(auth, credentials)
    if scheme.lower() != "bearer" or not credentials:
        raise _unauthorized("expected 'Authorization: Bearer <token>' or Basic user:password")
    principal = auth.by_token(credentials)
    if principal is None:
        raise _unauthorized("unknown bearer token")
    return principal


def _basic(auth: DoorAuth, credentials: str) -> Principal:
    decoded = None
    with contextlib.suppress(binascii.Error, UnicodeDecodeError):
        decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
    if decoded is None or ":" not in decoded:  # raised outside the except: no link to the bytes
        raise _unauthorized("malformed Basic credentials")
    name, _, password = decoded.partition(":")
    principal = auth.by_password(name, password) if name and password else None
    if principal is None:
        raise _unauthorized("invalid user name or password")
    return principal


def may(principal: Principal | None, right: Right, topic: str) -> bool:
    return acl_authorize(principal, RIGHT_OPERATIONS[right], (ResourceType.TOPIC, topic))


def may_any(principal: Principal | None, topic: str) -> bool:
    """Holds any HTTP right on ``topic`` (lists are filtered to these)."""
    return any(may(principal, right, topic) for right in Right)


def may_produce_somewhere(principal: Principal | None) -> bool:
    """Holds WRITE on some topic (registering a transaction producer needs it)."""
    return authorize_any(principal, Operation.WRITE, ResourceType.TOPIC)


def may_create_topic(principal: Principal | None, topic: str) -> bool:
    """Whether a lookup (a route query, Kafka Metadata) by ``principal`` may create a missing
    ``topic``: always with auth off (None); else with WRITE on it (a first produce creates it
    on every door) or CREATE on it or on the cluster (Kafka's Metadata rule)."""
    if principal is None:
        return True
    rights = (
        (Operation.WRITE, (ResourceType.TOPIC, topic)),
        (Operation.CREATE, (ResourceType.TOPIC, topic)),
        (Operation.CREATE, cluster()),
    )
    return any(acl_authorize(principal, operation, resource) for operation, resource in rights)


def is_global_admin(principal: Principal | None) -> bool:
    return acl_authorize(principal, Operation.DESCRIBE, cluster())


def authorize(principal: Principal | None, right: Right, topic: str) -> None:
    """Raise 403 unless auth is off or the principal holds ``right`` on ``topic``."""
    if principal is not None and not may(principal, right, topic):
        raise BrokerError(403, "forbidden", f"{principal.name!r} may not {right.value} topic {topic!r}")


def authorize_global_admin(principal: Principal | None) -> None:
    if principal is not None and not is_global_admin(principal):
        raise BrokerError(403, "forbidden", f"{principal.name!r} lacks admin rights on '*'")


def caller(auth: DoorAuth | None, headers: Mapping[str, str]) -> Principal | None:
    """Who sent a request (``None``: auth off): a user, a broker on its own, or a broker
    forwarding for a user, each credential checked (:func:`broker.peer_identity.resolve_principal`;
    401 for a bad one). ``x-sparkmq-forwarded`` grants nothing: it only narrows a request to this
    broker's own data (the Python client sends it too); internal routes check the caller with
    :func:`internal_caller`."""
    if auth is None:
        return None

    def checked(authorization: str | None) -> Principal:
        principal = authenticate(auth, authorization)
        assert principal is not None  # auth is on
        return principal

    return resolve_principal(checked, headers.get("authorization"), headers.get(ON_BEHALF_OF_HEADER))


def internal_caller(auth: DoorAuth | None, headers: Mapping[str, str], route: str) -> None:
    """401 without a valid credential, 403 for any user (superusers too): ``route`` is broker to
    broker."""
    require_broker(caller(auth, headers), route)
