"""The users file: the current form, the former tokens form (same rights as the HTTP door's
``TokenTable``), validation errors naming the field, atomic 0600 writes, reloads."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from broker.auth import Right
from broker.security import (
    AccessKey,
    Grant,
    InvalidUsersFile,
    Operation,
    Permission,
    ReloadOutcome,
    ResourceType,
    ScramMechanism,
    User,
    UsersFile,
    UserTable,
    authorize,
    hash_token,
    load_users,
    make_credential,
    new_access_key,
    new_token,
    parse_users,
    write_users,
)

LEGACY: dict[str, list[dict[str, Any]]] = {
    "tokens": [
        {"name": "admin", "token": "admin-token", "admin": ["*"], "produce": ["*"], "consume": ["*"]},
        {"name": "writer", "token": "writer-token", "produce": ["orders*"]},
        {"token": "reader-token", "consume": ["orders"]},
    ]
}
RIGHT_TO_OPERATION = {
    Right.PRODUCE: Operation.WRITE,
    Right.CONSUME: Operation.READ,
    Right.ADMIN: Operation.CREATE,
}


def former_rule(entry: dict[str, Any], right: Right, topic: str) -> bool:
    """The former HTTP TokenTable's rule: the topic matches one of the right's globs."""
    return any(fnmatchcase(topic, pattern) for pattern in entry.get(right.value, []))


def test_legacy_tokens_file_keeps_its_rights() -> None:
    new = parse_users(LEGACY)
    topics = ["orders", "orders-eu", "payments", "x"]
    for index, before in enumerate(LEGACY["tokens"]):
        user = new.by_token(before["token"])
        assert user is not None and user.name == before.get("name", f"token-{index}")
        for right, operation in RIGHT_TO_OPERATION.items():
            for topic in topics:
                assert authorize(user.principal(), operation, (ResourceType.TOPIC, topic)) == former_rule(
                    before, right, topic
                )
        assert authorize(user.principal(), Operation.DESCRIBE, (ResourceType.CLUSTER, "kafka-cluster")) == (
            "*" in before.get("admin", [])
        )
    assert new.user("token-2") is not None and new.by_token("not-a-token") is None


def test_legacy_rules_still_apply() -> None:
    for document, field in (
        ({"tokens": [{"token": "short"}]}, "tokens[0].token"),
        ({"tokens": [{"token": "long-enough", "extra": 1}]}, "unknown fields"),
        ({"tokens": [{"token": "long-enough", "produce": "x"}]}, "tokens[0].produce"),
        ({"tokens": [{"token": "long-enough"}, {"token": "long-enough"}]}, "token is used twice"),
    ):
        with pytest.raises(InvalidUsersFile, match=field.replace("[", "\\[").replace("]", "\\]")):
            parse_users(document)


def full_user() -> User:
    return User(
        name="alice",
        token_hashes=(hash_token("t0ken-alice-123"),),
        scram={m: make_credential(m, "wonderland") for m in ScramMechanism},
        access_keys=(AccessKey("AKALICE01", "alice-secret-key"),),
        produce=("orders-*",),
        consume=("orders-*",),
        rights=(
            Grant(ResourceType.GROUP, "billing-*", frozenset({Operation.READ})),
            Grant(ResourceType.TOPIC, "orders-secret", frozenset({Operation.ALL}), Permission.DENY),
            Grant(ResourceType.CLUSTER, "*", frozenset({Operation.IDEMPOTENT_WRITE})),
        ),
    )


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "users.json"
    table = UserTable((full_user(), User("broker-1", token_hashes=(hash_token(new_token()),), broker=True)))
    root_scram = {ScramMechanism.SHA_256: make_credential(ScramMechanism.SHA_256, "pw")}
    table = table.with_user(User("root", scram=root_scram, superuser=True))
    write_users(path, table)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["users.json"]  # no temporary left
    loaded = load_users(path)
    assert loaded == table
    text = path.read_text()
    assert "wonderland" not in text and "t0ken-alice-123" not in text
    document = json.loads(text)
    assert document["users"][0]["scram"]["SCRAM-SHA-256"].startswith("salt=")
    assert document["users"][1]["broker"] is True and document["users"][2]["superuser"] is True
    alice = loaded.user("alice")
    assert alice is not None and loaded.by_token("t0ken-alice-123") == alice
    principal = alice.principal()
    assert authorize(principal, Operation.READ, (ResourceType.GROUP, "billing-eu"))
    assert not authorize(principal, Operation.READ, (ResourceType.TOPIC, "orders-secret"))
    assert loaded.scram_credential("alice", ScramMechanism.SHA_512) == alice.scram[ScramMechanism.SHA_512]
    assert loaded.scram_credential("nobody", ScramMechanism.SHA_512) is None


def test_legacy_file_is_written_back_hashed(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    write_users(path, parse_users(LEGACY))
    assert "admin-token" not in path.read_text()
    assert load_users(path).by_token("admin-token") is not None


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": ""}, r"users\[0\]\.name"),
        ({"name": "a\nb"}, r"users\[0\]\.name"),
        ({"name": " a"}, r"users\[0\]\.name"),
        ({"name": "a", "token": "plaintext"}, r"'a' has unknown fields \['token'\] \(store tokens hashed"),
        ({"name": "a", "tokens": ["md5:00"]}, r"users\[0\] 'a'\.tokens\[0\]"),
        ({"name": "a", "scram": {"SCRAM-SHA-1": "x"}}, r"unknown mechanism 'SCRAM-SHA-1'"),
        ({"name": "a", "scram": {"SCRAM-SHA-256": "salt=AAAA"}}, r"'a'\.scram\['SCRAM-SHA-256'\]"),
        ({"name": "a", "rights": [{"resource": "queue", "pattern": "x", "operations": ["read"]}]},
         r"'a'\.rights\[0\]\.resource"),
        ({"name": "a", "rights": [{"resource": "topic", "operations": ["read"]}]}, r"rights\[0\]\.pattern"),
        ({"name": "a", "rights": [{"resource": "topic", "pattern": "x", "operations": ["raed"]}]}, "'raed'"),
        ({"name": "a", "rights": [{"resource": "topic", "pattern": "x", "operations": []}]}, "operations"),
        ({"name": "a", "rights": [{"resource": "topic", "pattern": "x", "operations": ["read"],
                                   "permission": "maybe"}]}, "'maybe'"),
        ({"name": "a", "superuser": "yes"}, r"'a'\.superuser"),
        ({"name": "a", "produce": [""]}, r"'a'\.produce"),
        ({"name": "a", "access_keys": [{"access_key": "AK"}]}, r"'a'\.access_keys\[0\] must be an object"),
        ({"name": "a", "access_keys": [{"access_key": "A K", "secret_key": "123456"}]},
         r"access_keys\[0\]\.access_key"),
        ({"name": "a", "access_keys": [{"access_key": "AKA", "secret_key": "12345"}]},
         r"access_keys\[0\]\.secret_key must be 6-128"),
    ],
)  # fmt: skip
def test_errors_name_the_field(entry: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidUsersFile, match=message):
        parse_users({"users": [entry]})


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidUsersFile, match="top-level"):
        parse_users({"users": [], "groups": []})
    with pytest.raises(InvalidUsersFile, match="defined twice"):
        parse_users({"users": [{"name": "a"}], "tokens": [{"name": "a", "token": "long-enough"}]})
    path = tmp_path / "users.json"
    path.write_text('{"users": [\n  {"name": "a",}\n]}')
    with pytest.raises(InvalidUsersFile, match="not valid JSON at line 2 column"):
        load_users(path)
    with pytest.raises(InvalidUsersFile, match="cannot read users file"):
        load_users(tmp_path / "missing.json")


def test_reload_if_changed(tmp_path: Path) -> None:
    path, alice = tmp_path / "users.json", full_user()
    write_users(path, UserTable((alice, User("bob", token_hashes=(hash_token("bob-token-1"),)))))
    users = UsersFile(path)
    assert users.reload_if_changed().outcome is ReloadOutcome.UNCHANGED
    os.utime(path, ns=(1, 1))  # touched, same content
    assert users.reload_if_changed().outcome is ReloadOutcome.UNCHANGED
    before = users.table
    write_users(path, UserTable((alice, User("carol", token_hashes=(hash_token("carol-token"),)))))
    result = users.reload_if_changed()
    assert (result.outcome, result.users, result.revoked) == (ReloadOutcome.RELOADED, 2, frozenset({"bob"}))
    assert users.table is not before and users.table.by_token("carol-token") is not None
    path.write_text('{"users": [{"name": "x", "tokens": ["sha256:nothex"]}]}')
    broken = users.reload_if_changed()
    assert (
        broken.outcome is ReloadOutcome.REJECTED and broken.error is not None and "tokens[0]" in broken.error
    )
    assert users.table.by_token("carol-token") is not None  # the old table stays
    assert users.reload_if_changed().outcome is ReloadOutcome.UNCHANGED  # reported once
    path.unlink()
    assert users.reload_if_changed().outcome is ReloadOutcome.REJECTED


def test_a_password_change_revokes() -> None:
    old = UserTable((full_user(),))
    changed = {ScramMechanism.SHA_256: make_credential(ScramMechanism.SHA_256, "new-password")}
    new = UserTable((User("alice", token_hashes=full_user().token_hashes, scram=changed),))
    from broker.security.users import revoked_users

    assert revoked_users(old, new) == frozenset({"alice"})
    assert revoked_users(old, old) == frozenset()


def test_access_keys_find_their_user_and_revoke_on_change(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    write_users(path, UserTable((full_user(),)))
    assert "alice-secret-key" in path.read_text()  # HMAC needs the key itself (module docstring)
    table = load_users(path)
    found = table.by_access_key("AKALICE01")
    assert found is not None and found[0].name == "alice" and found[1].secret_key == "alice-secret-key"
    assert table.by_access_key("AKNOBODY") is None
    assert "alice-secret-key" not in repr(found[1]) + repr(found[0])
    from broker.security.users import revoked_users

    rotated = UserTable(
        (dataclasses.replace(full_user(), access_keys=(AccessKey("AKALICE02", "other-secret"),)),)
    )
    assert revoked_users(table, rotated) == frozenset({"alice"})
    with pytest.raises(InvalidUsersFile, match="access key is used twice"):
        parse_users({"users": [
            {"name": "a", "access_keys": [{"access_key": "AKX", "secret_key": "123456"}]},
            {"name": "b", "access_keys": [{"access_key": "AKX", "secret_key": "654321"}]},
        ]})  # fmt: skip


def test_new_access_keys_are_fresh_and_valid() -> None:
    first, second = new_access_key(), new_access_key()
    assert first.access_key != second.access_key and first.secret_key != second.secret_key
    document = {"users": [{"name": "a", "access_keys": [
        {"access_key": first.access_key, "secret_key": first.secret_key}]}]}  # fmt: skip
    assert parse_users(document).by_access_key(first.access_key) is not None
