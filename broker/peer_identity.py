"""Broker-to-broker identity: what a forwarded request carries and how the receiver judges it.

**What a peer call carries** (built by :func:`peer_headers`, sent by
:class:`broker.peers.PeerClient`, the one client between brokers)::

    authorization:           Bearer <this broker's secret>     who is calling: a broker user
    x-sparkmq-on-behalf-of:  <the user's own Authorization>    for whom (absent: the broker itself)
    x-sparkmq-forwarded:     <this broker's name>               serve here, do not forward again

**Trust model** (docs/security.md#forwarded-requests). The forwarding broker passes the user's
*original credential*, not a name it vouches for, and the receiver authenticates both
(:func:`resolve_principal`): the caller must be a ``broker`` user of the receiver's users file,
the on-behalf-of credential must be a plain user's, and data rights are that user's
(:meth:`broker.security.Principal.forwarding`, judged by :func:`broker.security.authorize`). So a
leaked broker secret alone lets nobody act as a user it does not hold the credential of, a
broker cannot widen a user's rights, and a user who sets ``x-sparkmq-on-behalf-of`` gains
nothing (it is ignored unless the caller is a broker). Internal routes (``/replica/*``,
``/kafka/peer/*``, the sink's chunk route) want the broker itself: :func:`require_broker` answers
403 to any user, superusers included.

Pure: no I/O except :func:`load_peer_credential` reading one file; how one ``Authorization``
value is checked (Bearer, Basic) is the door's, passed in as an :data:`Authenticate`. Secrets
never appear in a ``repr`` or an error message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.errors import BrokerError
from broker.security import Principal, UserTable
from store import InvalidArgument

#: The user's original ``Authorization`` value on a request a broker forwards.
ON_BEHALF_OF_HEADER = "x-sparkmq-on-behalf-of"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
#: A broker secret is a bearer token (``sparkmq auth add-user NAME --broker --token``).
MIN_SECRET_CHARS = 16


@dataclass(frozen=True, slots=True)
class PeerCredential:
    """This broker's identity towards the others: a ``broker`` user of the users file and one of
    its bearer tokens."""

    name: str
    secret: str = field(repr=False)

    @property
    def authorization(self) -> str:
        return f"Bearer {self.secret}"


def parse_peer_credential(text: str, where: str = "--peer-credential") -> PeerCredential:
    """``NAME:SECRET`` -> :class:`PeerCredential`; :class:`InvalidArgument` says what is wrong
    (never quoting the secret)."""
    name, colon, secret = text.strip().partition(":")
    if not colon or _NAME.match(name) is None:
        raise InvalidArgument(f"{where}: expected NAME:SECRET (NAME of letters, digits, '_', '-', '.')")
    if len(secret) < MIN_SECRET_CHARS or any(ord(ch) < 0x21 for ch in secret):
        raise InvalidArgument(f"{where}: the secret must be >= {MIN_SECRET_CHARS} printable characters")
    return PeerCredential(name, secret)


def load_peer_credential(path: Path) -> PeerCredential:
    """A file holding ``NAME:SECRET`` on its first line (keep it mode 0600)."""
    try:
        first = path.read_text(encoding="utf-8").splitlines()[:1]
    except OSError as exc:
        raise InvalidArgument(f"cannot read peer credential file {path}: {exc.strerror}") from None
    return parse_peer_credential(first[0] if first else "", f"peer credential file {path}")


def check_peer_credential(users: UserTable, credential: PeerCredential) -> None:
    """Refuse (:class:`InvalidArgument`) a credential the users file does not know as a broker:
    a broker that starts with one would be refused by every peer."""
    user = users.by_token(credential.secret)
    if user is None or user.name != credential.name:
        raise InvalidArgument(
            f"peer credential {credential.name!r}: no user of that name holds this token in the auth file "
            f"(sparkmq auth add-user {credential.name} --broker --token)"
        )
    if not user.broker:
        raise InvalidArgument(f"peer credential {credential.name!r}: that user is not a broker")


def peer_headers(headers: Mapping[str, str], credential: PeerCredential | None) -> dict[str, str]:
    """The headers of a peer call: the user's ``authorization`` (if any) moves to
    :data:`ON_BEHALF_OF_HEADER`, the broker's takes its place. Without a credential (auth off)
    the headers go as they are."""
    sent = {name.lower(): value for name, value in headers.items()}
    sent.pop(ON_BEHALF_OF_HEADER, None)
    if credential is None:
        return sent
    user = sent.pop("authorization", None)
    if user is not None:
        sent[ON_BEHALF_OF_HEADER] = user
    sent["authorization"] = credential.authorization
    return sent


#: The door's authentication of one ``Authorization`` value: its principal, or
#: :class:`BrokerError` 401 (missing, malformed or unknown: one answer for all).
Authenticate = Callable[[str | None], Principal]


def resolve_principal(
    authenticate: Authenticate, authorization: str | None, on_behalf_of: str | None
) -> Principal:
    """Who is asking (see the module docstring): a user; a broker on its own; or a broker
    forwarding for a user (:meth:`Principal.forwarding`). ``authenticate`` checks each header
    (401 for a bad one); an on-behalf-of naming a broker is 401 too (brokers do not forward
    for brokers). ``on_behalf_of`` sent by a user is ignored."""
    caller = authenticate(authorization)
    if not caller.is_broker or on_behalf_of is None:
        return caller
    user = authenticate(on_behalf_of)
    if user.is_broker:
        raise BrokerError(401, "unauthorized", f"{ON_BEHALF_OF_HEADER} must name a user, not a broker")
    return caller.forwarding(user)


def require_broker(principal: Principal | None, route: str) -> None:
    """403 unless auth is off or the caller is a broker: internal routes refuse every user,
    superusers included."""
    if principal is not None and not principal.is_broker:
        raise BrokerError(
            403, "forbidden", f"{route} is internal (broker to broker), not for user {principal.name!r}"
        )
