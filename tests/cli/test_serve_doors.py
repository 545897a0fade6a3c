"""``sparkmq serve`` refuses a door that checks no credentials on a broker started with --auth-file,
and serves the remoting door (which checks RocketMQ signatures) on one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.security.remoting_signature import ACCESS_KEY, SIGNATURE, sign_request
from ingest_api.remoting.codec import request
from ingest_api.remoting.codes import RequestCode, ResponseCode
from sparkmq.cli import app
from tests.operators.broker_process import start_broker
from tests.remoting.rawclient import RawClient
from tests.support.network import free_port

KEY = {"access_key": "AKAPP0001", "secret_key": "app-secret-key-1"}


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


@pytest.mark.slow
def test_the_remoting_door_serves_a_secured_broker_with_signatures(tmp_path: Path) -> None:
    """``sparkmq serve --auth-file --remoting-port`` starts, and its remoting door wants signed
    requests (a subprocess: the CLI's own wiring)."""
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"users": [{"name": "app", "produce": ["t"], "access_keys": [KEY]}]}))
    users.chmod(0o600)
    port = free_port()
    args = ("--operators", "off", "--auth-file", str(users), "--remoting-port", str(port))
    broker = start_broker(tmp_path, extra_args=args)
    try:
        fields = {"topic": "t", ACCESS_KEY: KEY["access_key"]}
        fields[SIGNATURE] = sign_request(fields, b"", KEY["secret_key"].encode())
        with RawClient("127.0.0.1", port) as client:
            client.send(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, fields))
            assert client.recv().code == ResponseCode.SUCCESS
            client.send(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 2, {"topic": "t"}))
            refused = client.recv()
        assert (refused.code, refused.remark) == (ResponseCode.NO_PERMISSION, "username cannot be null.")
    finally:
        assert broker.stop() == 0
