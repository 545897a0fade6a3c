"""``sparkmq auth add-user`` and ``sparkmq auth init``: real files, real TLS handshakes with the
certificates ``init`` writes, and SCRAM / PLAIN / token logins against the users it writes."""

from __future__ import annotations

import json
import ssl
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.peer_identity import load_peer_credential
from broker.security import (
    Operation,
    ResourceType,
    ScramClient,
    ScramMechanism,
    ScramServer,
    authenticate_plain,
    authorize,
    format_plain,
    load_users,
)
from sparkmq.cli import app
from tests.support.tls import LeafFiles, handshake

runner = CliRunner()


def scram_login(users_path: Path, name: str, password: str, mechanism: ScramMechanism) -> str:
    table = load_users(users_path)
    server = ScramServer(mechanism, table.scram_credential, b"mock")
    client = ScramClient(mechanism, name, password)
    final = client.handle_server_first(server.handle_client_first(client.client_first()))
    client.handle_server_final(server.handle_client_final(final))
    return server.username


def test_add_user_with_password_and_token(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    result = runner.invoke(
        app,
        ["auth", "add-user", "alice", "--password-stdin", "--token", "--produce", "orders*",
         "--consume", "orders*", "--file", str(users)],
        input="wonderland\n",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert len(token) >= 40 and token not in users.read_text() and "wonderland" not in users.read_text()
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    table = load_users(users)
    alice = table.by_token(token)
    assert alice is not None and alice.name == "alice"
    assert authorize(alice.principal(), Operation.WRITE, (ResourceType.TOPIC, "orders-1"))
    assert not authorize(alice.principal(), Operation.WRITE, (ResourceType.TOPIC, "payments"))
    for mechanism in ScramMechanism:
        assert scram_login(users, "alice", "wonderland", mechanism) == "alice"
    assert authenticate_plain(table.scram_credential, b"m", format_plain("alice", "wonderland")) == "alice"


def test_add_user_keeps_others_and_refuses_duplicates(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"tokens": [{"name": "legacy", "token": "legacy-token", "consume": ["*"]}]}))
    added = runner.invoke(app, ["auth", "add-user", "peer", "--token", "--broker", "--file", str(users)])
    assert added.exit_code == 0, added.output
    table = load_users(users)
    assert [u.name for u in table.users] == ["legacy", "peer"]
    assert table.by_token("legacy-token") is not None and "legacy-token" not in users.read_text()
    peer = table.user("peer")
    assert peer is not None and peer.broker and peer.principal().is_broker
    again = runner.invoke(app, ["auth", "add-user", "peer", "--token", "--file", str(users)])
    assert again.exit_code == 2 and "--replace" in again.stderr
    replaced = runner.invoke(
        app, ["auth", "add-user", "peer", "--token", "--superuser", "--replace", "--file", str(users)]
    )
    assert replaced.exit_code == 0
    peer = load_users(users).user("peer")
    assert peer is not None and peer.superuser and not peer.broker


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["auth", "add-user", "x"], "", "--password-stdin"),
        (["auth", "add-user", "bad\tname", "--token"], "", "name"),
        (["auth", "add-user", "x", "--password-stdin"], "\n", "no password"),
    ],
)
def test_add_user_usage_errors(tmp_path: Path, args: list[str], stdin: str, message: str) -> None:
    users = tmp_path / "users.json"
    result = runner.invoke(app, [*args, "--file", str(users)], input=stdin)
    assert result.exit_code == 2 and message in result.stderr
    assert not users.exists()


def test_add_user_refuses_to_rewrite_a_broken_file(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text('{"users": [{"name": "a", "token": "plain"}]}')
    result = runner.invoke(app, ["auth", "add-user", "b", "--token", "--file", str(users)])
    assert result.exit_code == 1 and "invalid users file" in result.stderr
    assert users.read_text() == '{"users": [{"name": "a", "token": "plain"}]}'


def test_init_writes_a_working_ca_certificate_and_superuser(tmp_path: Path) -> None:
    folder = tmp_path / "secure"
    result = runner.invoke(
        app, ["auth", "init", str(folder), "--host", "broker-1.test", "--host", "10.1.2.3"]
    )
    assert result.exit_code == 0, result.output
    password = result.stdout.strip()
    assert len(password) >= 20
    assert sorted(p.name for p in folder.iterdir()) == [
        "broker-key.pem", "broker.credential", "broker.pem", "ca-key.pem", "ca.pem", "users.json",
    ]  # fmt: skip
    for private in ("broker-key.pem", "broker.credential", "ca-key.pem", "users.json"):
        assert stat.S_IMODE((folder / private).stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    leaf = LeafFiles("broker", folder / "broker.pem", folder / "broker-key.pem")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(leaf.cert, leaf.key)
    client = ssl.create_default_context(cafile=str(folder / "ca.pem"))
    for host in ("127.0.0.1", "localhost", "broker-1.test", "10.1.2.3"):
        peer = handshake(server, client, host)
        assert ("commonName", "sparkmq-broker") in [pair for rdn in peer["subject"] for pair in rdn]  # type: ignore[attr-defined]
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(server, ssl.create_default_context(cafile=str(folder / "ca.pem")), "other.test")
    users = folder / "users.json"
    assert scram_login(users, "admin", password, ScramMechanism.SHA_512) == "admin"
    admin = load_users(users).user("admin")
    assert admin is not None and admin.superuser
    # the broker identity (serve --peer-credential-file broker.credential): a broker user's token
    credential = load_peer_credential(folder / "broker.credential")
    broker = load_users(users).by_token(credential.secret)
    assert broker is not None and broker.name == credential.name == "broker" and broker.broker
    assert credential.secret not in users.read_text()


def test_init_reads_the_password_from_stdin_and_never_overwrites(tmp_path: Path) -> None:
    folder = tmp_path / "secure"
    first = runner.invoke(
        app, ["auth", "init", str(folder), "--user", "ops", "--password-stdin"], input="pw-ops-1\n"
    )
    assert first.exit_code == 0 and first.stdout == ""
    assert scram_login(folder / "users.json", "ops", "pw-ops-1", ScramMechanism.SHA_256) == "ops"
    before = (folder / "ca.pem").read_bytes()
    again = runner.invoke(app, ["auth", "init", str(folder)])
    assert again.exit_code == 2 and "refusing to overwrite" in again.stderr
    assert (folder / "ca.pem").read_bytes() == before


def test_add_user_with_an_access_key(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    result = runner.invoke(
        app, ["auth", "add-user", "rmq", "--access-key", "--produce", "orders*", "--file", str(users)]
    )
    assert result.exit_code == 0, result.output
    access_key, secret_key = result.stdout.split()
    found = load_users(users).by_access_key(access_key)
    assert found is not None and found[0].name == "rmq" and found[1].secret_key == secret_key
    assert authorize(found[0].principal(), Operation.WRITE, (ResourceType.TOPIC, "orders-1"))
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
