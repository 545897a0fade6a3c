"""The users file: who may connect (tokens, SASL passwords) and what they may do (rights).

One JSON object. ``users`` is the current form; ``tokens`` is the former HTTP-only form and is
still read, with the same rights (``produce``/``consume``/``admin`` topic globs)::

    {"users": [
       {"name": "alice",
        "tokens": ["sha256:<64 hex>"],
        "scram": {"SCRAM-SHA-256": "salt=..,stored_key=..,server_key=..,iterations=4096",
                  "SCRAM-SHA-512": "salt=..,stored_key=..,server_key=..,iterations=4096"},
        "produce": ["orders-*"], "consume": ["orders-*"], "admin": [],
        "rights": [{"resource": "group", "pattern": "billing-*", "operations": ["read"]},
                   {"resource": "topic", "pattern": "orders-secret", "operations": ["all"],
                    "permission": "deny"}],
        "access_keys": [{"access_key": "AKALICE01", "secret_key": "..."}],
        "superuser": false, "broker": false}],
     "tokens": [{"name": "legacy", "token": "plaintext-token", "produce": ["*"]}]}

**Secrets at rest.** A token is kept as ``sha256:<hex>`` of itself: tokens are generated with
256 bits of entropy (``secrets.token_urlsafe(32)``), so a fast hash is already infeasible to
invert and lets a request be matched by one dict lookup (then ``hmac.compare_digest``); a
slow KDF is only needed for human-chosen passwords, which is what the SCRAM entries are (salted
PBKDF2, Kafka's format, no plaintext). Tokens of the former ``tokens`` section are plaintext in
that file; they are hashed in memory, and written hashed when the file is rewritten.

**Access keys** are RocketMQ's credentials (the remoting door's ACL signature, the gRPC door's
``MQv2-HMAC-SHA1`` header). Those protocols sign each request with HMAC-SHA1 under the secret
key, so the verifier must hold the secret key itself, as RocketMQ's own ``plain_acl.yml`` and
ACL 2.0 user store do: it is the one secret kept as given, which is why the file is 0600. An
access key is 3-64 characters of ``[A-Za-z0-9._-]``, a secret key 6-128 printable ASCII
characters without spaces (RocketMQ's minimum is 6); an access key names one user only.

**Shorthands** (today's HTTP rights) expand into Kafka operations (:func:`shorthand_grants`):
``produce`` = WRITE topic; ``consume`` = READ topic and READ on every group (the HTTP door
checks a group through its topic); ``admin`` = CREATE, DELETE, ALTER and the configs on the
topics, and with ``"*"`` also DESCRIBE/ALTER/CREATE on the cluster and DESCRIBE on every group.

Errors are :class:`InvalidUsersFile` naming the entry and field (``users[2] 'alice'.rights[0]
.operations``), never a secret's value.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from broker.security.acl import Grant, Operation, Permission, Principal, PrincipalKind, ResourceType
from broker.security.errors import InvalidUsersFile
from broker.security.scram_format import MAX_NAME_BYTES, ScramCredential, ScramMechanism

TOKEN_HASH_PREFIX = "sha256:"
_TOKEN_HASH = re.compile(r"sha256:[0-9a-f]{64}")
SHORTHANDS = ("produce", "consume", "admin")
#: A legacy plaintext token's minimum length (unchanged from the HTTP door's rule).
MIN_LEGACY_TOKEN_CHARS = 8
_USER_FIELDS = {"name", "tokens", "scram", "access_keys", "rights", "superuser", "broker", *SHORTHANDS}
_ACCESS_KEY = re.compile(r"[A-Za-z0-9._-]{3,64}")
_SECRET_KEY = re.compile(r"[!-~]{6,128}")
_RIGHT_FIELDS = {"resource", "pattern", "operations", "permission"}


def new_token() -> str:
    """A bearer token with 256 bits of entropy."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return TOKEN_HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class AccessKey:
    """A RocketMQ access key and its secret key (HMAC-SHA1 signatures; see the docstring)."""

    access_key: str
    secret_key: str = field(repr=False)


def new_access_key() -> AccessKey:
    """A fresh pair: ``SMQ`` + 16 upper-case base-32 characters, and a 256-bit secret key."""
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    access = "SMQ" + "".join(secrets.choice(alphabet) for _ in range(16))
    return AccessKey(access, secrets.token_urlsafe(32))


@dataclass(frozen=True, slots=True)
class User:
    """One user. ``rights`` are the explicit grants; ``grants`` adds the shorthands."""

    name: str
    token_hashes: tuple[str, ...] = field(default=(), repr=False)
    scram: Mapping[ScramMechanism, ScramCredential] = field(default_factory=dict, repr=False)
    access_keys: tuple[AccessKey, ...] = field(default=(), repr=False)
    produce: tuple[str, ...] = ()
    consume: tuple[str, ...] = ()
    admin: tuple[str, ...] = ()
    rights: tuple[Grant, ...] = ()
    superuser: bool = False
    broker: bool = False

    @property
    def grants(self) -> tuple[Grant, ...]:
        return shorthand_grants(self.produce, self.consume, self.admin) + self.rights

    def principal(self) -> Principal:
        kind = PrincipalKind.BROKER if self.broker else PrincipalKind.USER
        return Principal(self.name, kind, self.superuser, self.grants)


def shorthand_grants(
    produce: tuple[str, ...], consume: tuple[str, ...], admin: tuple[str, ...]
) -> tuple[Grant, ...]:
    """Today's HTTP rights as Kafka grants (see the module docstring)."""
    topic, group, cluster = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
    admin_ops = frozenset(
        {
            Operation.CREATE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    )
    grants = [Grant(topic, p, frozenset({Operation.WRITE})) for p in produce]
    grants += [Grant(topic, p, frozenset({Operation.READ})) for p in consume]
    if consume:
        grants.append(Grant(group, "*", frozenset({Operation.READ})))
    grants += [Grant(topic, p, admin_ops) for p in admin]
    if "*" in admin:
        cluster_ops = frozenset({Operation.DESCRIBE, Operation.ALTER, Operation.CREATE, *admin_ops})
        grants.append(Grant(cluster, "*", cluster_ops))
        grants.append(Grant(group, "*", frozenset({Operation.DESCRIBE})))
    return tuple(grants)


@dataclass(frozen=True)
class UserTable:
    """An immutable snapshot of the users file; swap a whole table to change it."""

    users: tuple[User, ...] = ()
    _by_name: Mapping[str, User] = field(init=False, repr=False, compare=False)
    _by_token: Mapping[str, User] = field(init=False, repr=False, compare=False)
    _by_access_key: Mapping[str, tuple[User, AccessKey]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", MappingProxyType({u.name: u for u in self.users}))
        by_token = {digest: u for u in self.users for digest in u.token_hashes}
        object.__setattr__(self, "_by_token", MappingProxyType(by_token))
        by_key = {k.access_key: (u, k) for u in self.users for k in u.access_keys}
        object.__setattr__(self, "_by_access_key", MappingProxyType(by_key))

    def user(self, name: str) -> User | None:
        return self._by_name.get(name)

    def by_token(self, token: str) -> User | None:
        """The token's user: a dict lookup on its hash, confirmed with ``compare_digest``."""
        digest = hash_token(token)
        user = self._by_token.get(digest)
        if user is None:
            return None
        found = any(hmac.compare_digest(digest, stored) for stored in user.token_hashes)
        return user if found else None

    def by_access_key(self, access_key: str) -> tuple[User, AccessKey] | None:
        """The user holding ``access_key`` and the pair (the caller verifies the signature)."""
        return self._by_access_key.get(access_key)

    def scram_credential(self, name: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """A :data:`~broker.security.scram.CredentialLookup` over this table."""
        user = self._by_name.get(name)
        return None if user is None else user.scram.get(mechanism)

    def with_user(self, user: User) -> UserTable:
        """A new table with ``user`` added, or replacing the user of the same name in place."""
        if user.name in self._by_name:
            return UserTable(tuple(user if u.name == user.name else u for u in self.users))
        return UserTable((*self.users, user))


def revoked_users(old: UserTable, new: UserTable) -> frozenset[str]:
    """Names whose sessions should end after a reload: removed, or credentials changed."""
    revoked = set()
    for user in old.users:
        now = new.user(user.name)
        if (
            now is None
            or now.token_hashes != user.token_hashes
            or dict(now.scram) != dict(user.scram)
            or now.access_keys != user.access_keys
        ):
            revoked.add(user.name)
    return frozenset(revoked)


# --- parsing -----------------------------------------------------------------------------------


def parse_users(document: Any) -> UserTable:
    """Validate a decoded users file; :class:`InvalidUsersFile` names the entry and field."""
    if not isinstance(document, dict) or not ({"users", "tokens"} & set(document)):
        raise InvalidUsersFile('users file must be a JSON object with a "users" (or "tokens") list')
    unknown = set(document) - {"users", "tokens"}
    if unknown:
        raise InvalidUsersFile(f"users file has unknown top-level fields {sorted(unknown)}")
    users = [_parse_user(e, f"users[{i}]") for i, e in enumerate(_list(document, "users", "users file"))]
    users += [_parse_legacy(e, i) for i, e in enumerate(_list(document, "tokens", "users file"))]
    names: set[str] = set()
    tokens: set[str] = set()
    access_keys: set[str] = set()
    for user in users:
        if user.name in names:
            raise InvalidUsersFile(f"user {user.name!r} is defined twice")
        names.add(user.name)
        if tokens & set(user.token_hashes) or len(set(user.token_hashes)) != len(user.token_hashes):
            raise InvalidUsersFile(f"user {user.name!r}: a token is used twice")
        tokens.update(user.token_hashes)
        keys = [k.access_key for k in user.access_keys]
        if access_keys & set(keys) or len(set(keys)) != len(keys):
            raise InvalidUsersFile(f"user {user.name!r}: an access key is used twice")
        access_keys.update(keys)
    return UserTable(tuple(users))


def _list(entry: dict[str, Any], key: str, where: str) -> list[Any]:
    value = entry.get(key, [])
    if not isinstance(value, list):
        raise InvalidUsersFile(f"{where}.{key} must be a list")
    return value


def _globs(entry: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    patterns = _list(entry, key, where)
    if not all(isinstance(p, str) and p for p in patterns):
        raise InvalidUsersFile(f"{where}.{key} must be a list of non-empty name patterns")
    return tuple(patterns)


def _flag(entry: dict[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise InvalidUsersFile(f"{where}.{key} must be true or false")
    return value


def check_name(name: Any, where: str) -> str:
    if (
        not isinstance(name, str)
        or not name
        or name != name.strip()
        or len(name.encode("utf-8")) > MAX_NAME_BYTES
        or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in name)
    ):
        raise InvalidUsersFile(
            f"{where}.name must be 1-{MAX_NAME_BYTES} bytes, no control characters or edge spaces"
        )
    return name


def _parse_user(entry: Any, where: str) -> User:
    if not isinstance(entry, dict):
        raise InvalidUsersFile(f"{where} must be an object")
    name = check_name(entry.get("name"), where)
    where = f"{where} {name!r}"
    unknown = set(entry) - _USER_FIELDS
    if unknown:
        hint = " (store tokens hashed: sparkmq auth add-user --token)" if "token" in unknown else ""
        raise InvalidUsersFile(f"{where} has unknown fields {sorted(unknown)}{hint}")
    token_hashes = _list(entry, "tokens", where)
    for index, digest in enumerate(token_hashes):
        if not isinstance(digest, str) or not _TOKEN_HASH.fullmatch(digest):
            raise InvalidUsersFile(f"{where}.tokens[{index}] must be 'sha256:' and 64 lowercase hex digits")
    scram = _parse_scram(entry.get("scram", {}), f"{where}.scram")
    keys = tuple(
        _parse_access_key(k, f"{where}.access_keys[{i}]")
        for i, k in enumerate(_list(entry, "access_keys", where))
    )
    rights = tuple(
        _parse_right(r, f"{where}.rights[{i}]") for i, r in enumerate(_list(entry, "rights", where))
    )
    return User(
        name=name,
        token_hashes=tuple(token_hashes),
        scram=MappingProxyType(scram),
        access_keys=keys,
        produce=_globs(entry, "produce", where),
        consume=_globs(entry, "consume", where),
        admin=_globs(entry, "admin", where),
        rights=rights,
        superuser=_flag(entry, "superuser", where),
        broker=_flag(entry, "broker", where),
    )


def _parse_access_key(value: Any, where: str) -> AccessKey:
    if not isinstance(value, dict) or set(value) != {"access_key", "secret_key"}:
        raise InvalidUsersFile(f'{where} must be an object with "access_key" and "secret_key"')
    access, secret = value["access_key"], value["secret_key"]
    if not isinstance(access, str) or not _ACCESS_KEY.fullmatch(access):
        raise InvalidUsersFile(f"{where}.access_key must be 3-64 characters of A-Z a-z 0-9 . _ -")
    if not isinstance(secret, str) or not _SECRET_KEY.fullmatch(secret):
        raise InvalidUsersFile(f"{where}.secret_key must be 6-128 printable ASCII characters, no spaces")
    return AccessKey(access, secret)


def _parse_scram(value: Any, where: str) -> dict[ScramMechanism, ScramCredential]:
    if not isinstance(value, dict):
        raise InvalidUsersFile(f"{where} must be an object of mechanism -> credential")
    known = {m.value: m for m in ScramMechanism}
    parsed = {}
    for mechanism_name, text in value.items():
        if mechanism_name not in known:
            raise InvalidUsersFile(f"{where} has unknown mechanism {mechanism_name!r} (want {sorted(known)})")
        if not isinstance(text, str):
            raise InvalidUsersFile(f"{where}[{mechanism_name!r}] must be a string")
        mechanism = known[mechanism_name]
        parsed[mechanism] = ScramCredential.from_kafka(text, mechanism, f"{where}[{mechanism_name!r}]")
    return parsed


def _parse_right(entry: Any, where: str) -> Grant:
    if not isinstance(entry, dict):
        raise InvalidUsersFile(f"{where} must be an object")
    unknown = set(entry) - _RIGHT_FIELDS
    if unknown:
        raise InvalidUsersFile(f"{where} has unknown fields {sorted(unknown)}")
    try:
        resource = ResourceType(entry.get("resource"))
    except ValueError:
        raise InvalidUsersFile(f"{where}.resource must be one of {[r.value for r in ResourceType]}") from None
    pattern = entry.get("pattern", "*" if resource is ResourceType.CLUSTER else None)
    if not isinstance(pattern, str) or not pattern:
        raise InvalidUsersFile(f"{where}.pattern must be a non-empty name pattern")
    operations = entry.get("operations")
    if not isinstance(operations, list) or not operations:
        raise InvalidUsersFile(f"{where}.operations must be a non-empty list")
    try:
        ops = frozenset(Operation(op) for op in operations)
        permission = Permission(entry.get("permission", "allow"))
    except ValueError as exc:
        raise InvalidUsersFile(f"{where}: {exc}") from None
    return Grant(resource, pattern, ops, permission)


def _parse_legacy(entry: Any, index: int) -> User:
    """A ``tokens`` entry of the former HTTP auth file, with its exact former rules."""
    where = f"tokens[{index}]"
    if not isinstance(entry, dict):
        raise InvalidUsersFile(f"{where} must be an object")
    unknown = set(entry) - {"name", "token", *SHORTHANDS}
    if unknown:
        raise InvalidUsersFile(f"{where} has unknown fields {sorted(unknown)}")
    token = entry.get("token")
    if not isinstance(token, str) or len(token) < MIN_LEGACY_TOKEN_CHARS:
        raise InvalidUsersFile(
            f"{where}.token must be a string of at least {MIN_LEGACY_TOKEN_CHARS} characters"
        )
    name = check_name(entry.get("name", f"token-{index}"), where)
    return User(
        name=name,
        token_hashes=(hash_token(token),),
        produce=_globs(entry, "produce", where),
        consume=_globs(entry, "consume", where),
        admin=_globs(entry, "admin", where),
    )


# --- writing -----------------------------------------------------------------------------------


def dump_users(table: UserTable) -> dict[str, Any]:
    """The table as a ``users`` document (legacy token users come out hashed)."""
    return {"users": [_dump_user(user) for user in table.users]}


def _dump_user(user: User) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": user.name}
    if user.token_hashes:
        entry["tokens"] = list(user.token_hashes)
    if user.scram:
        entry["scram"] = {
            m.value: c.to_kafka() for m, c in sorted(user.scram.items(), key=lambda i: i[0].value)
        }
    if user.access_keys:
        entry["access_keys"] = [
            {"access_key": k.access_key, "secret_key": k.secret_key} for k in user.access_keys
        ]
    for key in SHORTHANDS:
        if getattr(user, key):
            entry[key] = list(getattr(user, key))
    if user.rights:
        entry["rights"] = [_dump_right(grant) for grant in user.rights]
    if user.superuser:
        entry["superuser"] = True
    if user.broker:
        entry["broker"] = True
    return entry


def _dump_right(grant: Grant) -> dict[str, Any]:
    right: dict[str, Any] = {
        "resource": grant.resource_type.value,
        "pattern": grant.pattern,
        "operations": sorted(op.value for op in grant.operations),
    }
    if grant.permission is Permission.DENY:
        right["permission"] = "deny"
    return right
