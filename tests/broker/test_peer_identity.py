"""Broker-to-broker identity (broker/peer_identity.py) over a real users table: what a peer call
carries, who the receiver decides it is, and what the rights are judged on."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import pytest

from broker.auth import DoorAuth, authenticate
from broker.errors import BrokerError
from broker.peer_identity import (
    ON_BEHALF_OF_HEADER,
    Authenticate,
    PeerCredential,
    check_peer_credential,
    load_peer_credential,
    parse_peer_credential,
    peer_headers,
    require_broker,
    resolve_principal,
)
from broker.security import (
    Operation,
    Principal,
    ResourceType,
    ScramMechanism,
    User,
    UserTable,
    authorize,
    hash_token,
    make_credential,
    write_users,
)
from store import InvalidArgument

ADMIN, ALICE, BROKER = "admin-token-000000", "alice-token-000000", "broker-token-0000000000"
USERS = UserTable(
    (
        User("admin", token_hashes=(hash_token(ADMIN),), superuser=True),
        User(
            "alice",
            token_hashes=(hash_token(ALICE),),
            scram={ScramMechanism.SHA_256: make_credential(ScramMechanism.SHA_256, "alice-pw-1")},
            produce=("orders*",),
        ),
        User("b1", token_hashes=(hash_token(BROKER),), broker=True),
    )
)


def _door_auth() -> Authenticate:
    """The doors' own check (:func:`broker.auth.authenticate`) over ``USERS`` written to a file."""
    directory = Path(tempfile.mkdtemp(prefix="peer-identity-"))
    write_users(directory / "users.json", USERS)
    door = DoorAuth.open(directory / "users.json", directory / "secret")

    def check(authorization: str | None) -> Principal:
        principal = authenticate(door, authorization)
        assert principal is not None
        return principal

    return check


AUTH = _door_auth()
ORDERS, SECRET = (ResourceType.TOPIC, "orders"), (ResourceType.TOPIC, "secret")


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_a_peer_call_carries_the_brokers_credential_and_the_users_separately() -> None:
    credential = PeerCredential("b1", BROKER)
    sent = peer_headers(
        {"Authorization": bearer(ALICE), "Accept": "x", ON_BEHALF_OF_HEADER: "forged"}, credential
    )
    assert sent == {"authorization": bearer(BROKER), ON_BEHALF_OF_HEADER: bearer(ALICE), "accept": "x"}
    assert peer_headers({}, credential) == {"authorization": bearer(BROKER)}  # the broker itself
    assert peer_headers({"authorization": bearer(ALICE)}, None) == {"authorization": bearer(ALICE)}
    assert BROKER not in repr(credential)


def test_a_forwarded_request_is_judged_on_the_user_it_carries() -> None:
    forwarded = resolve_principal(AUTH, bearer(BROKER), bearer(ALICE))
    assert forwarded.is_broker and forwarded.effective.name == "alice"
    assert authorize(forwarded, Operation.WRITE, ORDERS)
    assert not authorize(forwarded, Operation.WRITE, SECRET)
    itself = resolve_principal(AUTH, bearer(BROKER), None)
    assert authorize(itself, Operation.WRITE, SECRET)
    basic = "Basic " + base64.b64encode(b"alice:alice-pw-1").decode()
    assert resolve_principal(AUTH, bearer(BROKER), basic).effective.name == "alice"


def test_users_cannot_borrow_rights_and_brokers_cannot_forward_for_brokers() -> None:
    alice = resolve_principal(AUTH, bearer(ALICE), bearer(ADMIN))  # ignored: alice is no broker
    assert alice.name == "alice" and not authorize(alice, Operation.WRITE, SECRET)
    for bad in (
        bearer(BROKER),
        bearer("unknown-token-0000"),
        "Basic " + base64.b64encode(b"alice:wrong").decode(),
    ):
        with pytest.raises(BrokerError) as info:
            resolve_principal(AUTH, bearer(BROKER), bad)
        assert info.value.status == 401
    with pytest.raises(BrokerError) as missing:
        resolve_principal(AUTH, None, None)
    assert missing.value.status == 401


def test_internal_routes_want_a_broker() -> None:
    require_broker(resolve_principal(AUTH, bearer(BROKER), None), "/replica/metadata")
    require_broker(None, "/replica/metadata")  # auth off
    for token in (ADMIN, ALICE):
        with pytest.raises(BrokerError) as info:
            require_broker(resolve_principal(AUTH, bearer(token), None), "/replica/metadata")
        assert info.value.status == 403


def test_the_peer_credential_is_checked_against_the_users_file(tmp_path: Path) -> None:
    check_peer_credential(USERS, parse_peer_credential(f"b1:{BROKER}"))
    path = tmp_path / "b1.peer"
    path.write_text(f"b1:{BROKER}\n")
    assert load_peer_credential(path) == PeerCredential("b1", BROKER)
    with pytest.raises(InvalidArgument, match="not a broker"):
        check_peer_credential(USERS, PeerCredential("alice", ALICE))
    with pytest.raises(InvalidArgument, match="no user of that name"):
        check_peer_credential(USERS, PeerCredential("b2", BROKER))
    with pytest.raises(InvalidArgument, match="NAME:SECRET") as info:
        parse_peer_credential(BROKER)
    assert BROKER not in str(info.value)
    with pytest.raises(InvalidArgument, match=">= 16"):
        parse_peer_credential("b1:short")
