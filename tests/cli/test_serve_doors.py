"""``sparkmq serve`` refuses a door that checks no credentials on a broker started with --auth-file."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sparkmq.cli import app


@pytest.mark.parametrize(("flag", "door"), [("--grpc-port", "gRPC")])
def test_a_door_without_authentication_is_refused_on_a_secured_broker(
    tmp_path: Path, flag: str, door: str
) -> None:
    users = tmp_path / "users.json"
    users.write_text('{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}')
    argv = ["serve", "--store-dir", str(tmp_path / "data"), "--port", "0", "--operators", "off"]
    result = CliRunner().invoke(app, [*argv, "--auth-file", str(users), flag, "0"], terminal_width=200)
    assert result.exit_code == 2, result.output
    assert door in result.output and "--auth-file" in result.output
    assert not (tmp_path / "data" / "commitlog").exists()  # refused before anything was opened
