"""``sparkmq serve`` refuses a door that checks no credentials on a broker started with --auth-file;
the gRPC door checks them (ingest_api/grpc/authz.py), so it runs there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.config import ServerConfig
from ingest_api.grpc.companion import GrpcCompanion
from sparkmq.cli import app
from sparkmq.cli.serve import ServeOptions, _grpc_companions
from store import InvalidArgument
from tests.support.stores import light_config

USERS = '{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}'


@pytest.mark.parametrize(("flag", "door"), [("--remoting-port", "remoting")])
def test_a_door_without_authentication_is_refused_on_a_secured_broker(
    tmp_path: Path, flag: str, door: str
) -> None:
    users = tmp_path / "users.json"
    users.write_text(USERS)
    argv = ["serve", "--store-dir", str(tmp_path / "data"), "--port", "0", "--operators", "off"]
    result = CliRunner().invoke(app, [*argv, "--auth-file", str(users), flag, "0"], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert door in result.output and "--auth-file" in result.output
    assert not (tmp_path / "data" / "commitlog").exists()  # refused before anything was opened


def test_the_grpc_door_runs_on_a_secured_broker(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(USERS)
    config = ServerConfig(store=light_config(tmp_path / "data"), auth_file=users)
    (door,) = _grpc_companions(ServeOptions(config, {"grpc_port": 0}))
    assert isinstance(door, GrpcCompanion) and door.port == 0


def test_a_secured_broker_keeps_a_plaintext_grpc_door_on_loopback(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(USERS)
    config = ServerConfig(store=light_config(tmp_path / "data"), auth_file=users, allow_plaintext=True)
    config.check_plaintext("0.0.0.0", "gRPC")  # allowed by --allow-plaintext
    replace(config, allow_plaintext=False).check_plaintext("127.0.0.1", "gRPC")
    replace(config, auth_file=None, allow_plaintext=False).check_plaintext("0.0.0.0", "gRPC")  # auth off
    with pytest.raises(InvalidArgument, match=r"gRPC listener on '0\.0\.0\.0' would carry credentials"):
        replace(config, allow_plaintext=False).check_plaintext("0.0.0.0", "gRPC")
