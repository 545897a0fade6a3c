"""Optional bearer-token auth: tokens with per-topic ``produce`` / ``consume`` / ``admin`` rights.

The auth file is JSON::

    {"tokens": [
      {"name": "orders-writer", "token": "s3cret", "produce": ["orders", "orders-*"]},
      {"name": "spark", "token": "...", "consume": ["*"]},
      {"name": "ops", "token": "...", "admin": ["*"], "produce": ["*"], "consume": ["*"]}
    ]}

Each right lists topic patterns (shell-style globs, ``*`` = every topic). ``admin`` on a topic
allows creating or growing it; ``admin: ["*"]`` also allows cluster-wide reads (``/metrics``,
``GET /groups``). Any valid token may list topics (filtered to those it has a right on) and
read the OpenAPI spec. Missing or unknown token -> 401; known token without the right -> 403.
"""

from __future__ import annotations

import enum
import hmac
import json
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from broker.errors import BrokerError
from store import InvalidArgument


class Right(enum.Enum):
    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"


@dataclass(frozen=True)
class Principal:
    """A token's holder and the topic patterns of each right."""

    name: str
    token: str
    grants: dict[Right, tuple[str, ...]]

    def may(self, right: Right, topic: str) -> bool:
        return any(fnmatchcase(topic, pattern) for pattern in self.grants.get(right, ()))

    def may_any(self, topic: str) -> bool:
        return any(self.may(right, topic) for right in Right)

    @property
    def is_global_admin(self) -> bool:
        return "*" in self.grants.get(Right.ADMIN, ())


@dataclass(frozen=True)
class TokenTable:
    principals: tuple[Principal, ...]

    def lookup(self, token: str) -> Principal | None:
        """Constant-time comparison against every token (no early exit on a match)."""
        found: Principal | None = None
        for principal in self.principals:
            if hmac.compare_digest(principal.token.encode(), token.encode()):
                found = principal
        return found


def parse_token_table(document: Any) -> TokenTable:
    """Validate a decoded auth file; raise :class:`InvalidArgument` saying what is wrong."""
    if not isinstance(document, dict) or not isinstance(document.get("tokens"), list):
        raise InvalidArgument('auth file must be a JSON object with a "tokens" list')
    principals: list[Principal] = []
    seen: set[str] = set()
    for index, entry in enumerate(document["tokens"]):
        where = f"auth file tokens[{index}]"
        if not isinstance(entry, dict):
            raise InvalidArgument(f"{where} must be an object")
        unknown = set(entry) - {"name", "token", *(right.value for right in Right)}
        if unknown:
            raise InvalidArgument(f"{where} has unknown fields {sorted(unknown)}")
        token = entry.get("token")
        if not isinstance(token, str) or len(token) < 8:
            raise InvalidArgument(f"{where}.token must be a string of at least 8 characters")
        if token in seen:
            raise InvalidArgument(f"{where}.token is used twice")
        seen.add(token)
        grants: dict[Right, tuple[str, ...]] = {}
        for right in Right:
            patterns = entry.get(right.value, [])
            if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
                raise InvalidArgument(f"{where}.{right.value} must be a list of topic patterns")
            grants[right] = tuple(patterns)
        name = entry.get("name", f"token-{index}")
        if not isinstance(name, str):
            raise InvalidArgument(f"{where}.name must be a string")
        principals.append(Principal(name=name, token=token, grants=grants))
    return TokenTable(tuple(principals))


def load_token_table(path: Path) -> TokenTable:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"cannot read auth file {path}: {exc}") from exc
    return parse_token_table(document)


_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def authenticate(table: TokenTable | None, authorization: str | None) -> Principal | None:
    """The caller's principal; ``None`` when auth is off. Raises 401 when it is on and fails."""
    if table is None:
        return None
    if not authorization:
        raise BrokerError(401, "unauthorized", "missing bearer token", headers=_CHALLENGE)
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise BrokerError(401, "unauthorized", "expected 'Authorization: Bearer <token>'", headers=_CHALLENGE)
    principal = table.lookup(credentials.strip())
    if principal is None:
        raise BrokerError(401, "unauthorized", "unknown bearer token", headers=_CHALLENGE)
    return principal


def authorize(principal: Principal | None, right: Right, topic: str) -> None:
    """Raise 403 unless auth is off or the principal holds ``right`` on ``topic``."""
    if principal is not None and not principal.may(right, topic):
        raise BrokerError(403, "forbidden", f"token {principal.name!r} may not {right.value} topic {topic!r}")


def authorize_global_admin(principal: Principal | None) -> None:
    if principal is not None and not principal.is_global_admin:
        raise BrokerError(403, "forbidden", f"token {principal.name!r} lacks admin rights on '*'")
