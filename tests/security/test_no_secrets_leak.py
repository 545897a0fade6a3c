"""No exception message and no ``repr`` of a credential-bearing object contains a password, a
token, a stored key or a SCRAM proof."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.security import (
    ScramClient,
    ScramMechanism,
    ScramServer,
    SecurityError,
    User,
    UsersFile,
    UserTable,
    authenticate_plain,
    hash_token,
    load_users,
    make_credential,
    parse_plain,
    parse_users,
    write_users,
)
from broker.security.scram_format import parse_client_final

PASSWORD = "Pa55-w0rd-unique-xyzzy"
TOKEN = "tok3n-unique-plugh-0123456789"
SHA256 = ScramMechanism.SHA_256
CREDENTIAL = make_credential(SHA256, PASSWORD)
USER = User("alice", token_hashes=(hash_token(TOKEN),), scram={SHA256: CREDENTIAL})
TABLE = UserTable((USER,))


def secrets_of(*extra: bytes) -> list[str]:
    """Every secret in the forms it could leak in: text, base64, hex."""
    raw = [PASSWORD.encode(), TOKEN.encode(), CREDENTIAL.stored_key, CREDENTIAL.server_key, *extra]
    forms = []
    for value in raw:
        forms += [value.decode("latin-1"), base64.b64encode(value).decode(), value.hex()]
    forms.append(hash_token(TOKEN))
    return [form for form in forms if len(form) >= 8]


def assert_clean(text: str, forbidden: list[str]) -> None:
    leaked = [secret for secret in forbidden if secret in text]
    assert leaked == [], f"leaked {len(leaked)} secret form(s)"


def failures(tmp_path: Path) -> Iterator[tuple[BaseException, list[str]]]:
    lookup = TABLE.scram_credential
    attempts: list[Callable[[], object]] = [
        lambda: authenticate_plain(lookup, b"k", f"\0alice\0{PASSWORD}x".encode()),
        lambda: authenticate_plain(lookup, b"k", f"mallory\0alice\0{PASSWORD}".encode()),
        lambda: authenticate_plain(lookup, b"k", f"\0alice\0{PASSWORD}\0".encode()),
        lambda: parse_plain(f"\0alice\0{PASSWORD}".encode() + b"\xff"),
        lambda: parse_users({"users": [{"name": "a", "token": TOKEN}]}),
        lambda: parse_users({"users": [{"name": "a", "tokens": [TOKEN]}]}),
        lambda: parse_users({"tokens": [{"token": TOKEN, "extra": PASSWORD}]}),
        lambda: parse_users(
            {"users": [{"name": "a", "scram": {"SCRAM-SHA-256": CREDENTIAL.to_kafka()[:-4] + "99"}}]}
        ),
        lambda: parse_users({"users": [{"name": "a", "scram": {"SCRAM-SHA-256": PASSWORD}}]}),
    ]
    for attempt in attempts:
        with pytest.raises(SecurityError) as failed:
            attempt()
        yield failed.value, secrets_of()
    broken = tmp_path / "broken.json"
    broken.write_text(f'{{"tokens": [{{"token": "{TOKEN}",}}]}}')
    with pytest.raises(SecurityError) as failed:
        load_users(broken)
    yield failed.value, secrets_of()
    for tamper in (b"proof", b"nonce", b"binding"):
        server = ScramServer(SHA256, lookup, b"k")
        client = ScramClient(SHA256, "alice", PASSWORD if tamper != b"proof" else PASSWORD + "x")
        final = client.handle_server_first(server.handle_client_first(client.client_first()))
        proof = parse_client_final(final, SHA256).proof
        if tamper == b"nonce":
            final = final.replace(b",r=", b",r=Z")
        elif tamper == b"binding":
            final = final.replace(b"c=biws", b"c=bixx")
        with pytest.raises(SecurityError) as failed:
            server.handle_client_final(final)
        yield failed.value, secrets_of(proof, final)


def test_exceptions_carry_no_secret(tmp_path: Path) -> None:
    count = 0
    for error, forbidden in failures(tmp_path):
        assert_clean(f"{error} {error!r} {error.__cause__!r} {error.__context__!r}", forbidden)
        count += 1
    assert count == 13


def test_reprs_carry_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    write_users(path, TABLE)
    users_file = UsersFile(path)
    path.write_text('{"users": [{"name": "a", "tokens": ["' + TOKEN + '"]}]}')
    rejected = users_file.reload_if_changed()
    assert rejected.error is not None
    client = ScramClient(SHA256, "alice", PASSWORD)
    server = ScramServer(SHA256, TABLE.scram_credential, b"mock-secret-value")
    server.handle_client_first(client.client_first())
    objects: list[object] = [
        CREDENTIAL, USER, TABLE, USER.principal(), client, server,
        parse_plain(f"\0alice\0{PASSWORD}".encode()), rejected, users_file.table,
    ]  # fmt: skip
    for obj in objects:
        assert_clean(repr(obj) + str(obj), [*secrets_of(), "mock-secret-value"])
