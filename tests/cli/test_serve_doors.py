"""``sparkmq serve`` runs the RocketMQ doors on a broker started with --auth-file: both check
credentials (RocketMQ ACL signatures on the remoting door, MQv2 signatures on the gRPC door)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from broker.config import ServerConfig
from broker.security.remoting_signature import ACCESS_KEY, SIGNATURE, sign_request
from ingest_api.grpc.companion import GrpcCompanion
from ingest_api.remoting.codec import request
from ingest_api.remoting.codes import RequestCode, ResponseCode
from sparkmq.cli.serve import ServeOptions, _grpc_companions
from store import InvalidArgument
from tests.operators.broker_process import start_broker
from tests.remoting.rawclient import RawClient
from tests.support.network import free_port
from tests.support.stores import light_config

USERS = '{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}'
KEY = {"access_key": "AKAPP0001", "secret_key": "app-secret-key-1"}


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
