"""The remoting door behind ``--tls-cert/--tls-key``: TLS only (RocketMQ's enforcing mode).

A real broker (``running_broker`` over a real store) with its remoting door on a free port and
certificates of a test CA; the door's own codec speaks over ``ssl`` sockets (ali-ons has no
TLS): a send and a pull, the route answer keeping the port, a plaintext client disconnected,
a client trusting a foreign CA failing its handshake, mutual TLS, and the "auth on, plaintext,
off loopback" rule.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.config import ServerConfig
from broker.tls import TlsConfig
from ingest_api.remoting.bodies import decode_route
from ingest_api.remoting.codec import RemotingCommand, encode_command, request
from ingest_api.remoting.codes import RequestCode, ResponseCode
from ingest_api.remoting.companion import RemotingCompanion
from ingest_api.remoting.headers import send_request_ext_fields
from ingest_api.remoting.server import RemotingServerConfig, RemotingServerThread
from sparkmq.cli import app
from store import InvalidArgument
from tests.remoting.conftest import Door, serve_door
from tests.remoting.rawclient import RawClient
from tests.remoting.test_handlers import pull_fields, send_header
from tests.support.stores import light_config
from tests.support.tls import LeafFiles, TestCA

USERS = '{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}'


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path / "tls")


def tls_config(tmp_path: Path, tls: TlsConfig | None, **changes: object) -> ServerConfig:
    store = light_config(tmp_path / "store")
    return ServerConfig(store=store, log_level="warning", tls=tls, **changes).validate()  # type: ignore[arg-type]


@pytest.fixture
def tls_door(tmp_path: Path, ca: TestCA) -> Iterator[Door]:
    leaf = ca.issue("broker")
    with serve_door(tls_config(tmp_path, TlsConfig(leaf.cert, leaf.key)), RemotingCompanion(port=0)) as door:
        yield door


def call(
    door: Door, context: ssl.SSLContext, code: int, opaque: int, fields: dict[str, str], body: bytes = b""
) -> RemotingCommand:
    """One request on a fresh TLS connection; its answer."""
    with RawClient("127.0.0.1", door.door.port, tls=context) as client:
        client.send(request(code, opaque, fields, body))
        return client.recv()


def test_send_pull_and_routes_over_tls(tls_door: Door, ca: TestCA) -> None:
    tls_door.store.create_topic("TlsT", 1)
    fields = send_request_ext_fields(send_header("TlsT"), v2=True)
    sent = call(tls_door, ca.client_context(), RequestCode.SEND_MESSAGE_V2, 1, fields, b"secret")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    pulled = call(tls_door, ca.client_context(), RequestCode.PULL_MESSAGE, 2, pull_fields("TlsT", 0))
    assert pulled.code == ResponseCode.SUCCESS and pulled.ext_fields["nextBeginOffset"] == "1"
    view = tls_door.store.get_by_msg_id(sent.ext_fields["msgId"])
    assert view is not None and view.body == b"secret"
    assert pulled.body == tls_door.store.read_bytes(view.commitlog_offset, len(pulled.body))
    route = call(tls_door, ca.client_context(), RequestCode.GET_ROUTEINFO_BY_TOPIC, 3, {"topic": "TlsT"})
    # the NameServer answer names the same (TLS) port: a useTLS client stays on TLS
    assert decode_route(route.body).broker_datas[0].broker_addrs == {0: f"127.0.0.1:{tls_door.door.port}"}


def test_a_plaintext_client_is_disconnected_and_nothing_is_stored(tls_door: Door) -> None:
    tls_door.store.create_topic("PlainT", 1)
    fields = send_request_ext_fields(send_header("PlainT"), v2=True)
    with RawClient("127.0.0.1", tls_door.door.port) as plain:
        plain.send_raw(encode_command(request(RequestCode.SEND_MESSAGE_V2, 1, fields, b"clear")))
        assert plain.closed_by_server()
    assert tls_door.store.max_offset("PlainT", 0) == 0


def test_a_client_trusting_another_ca_fails_the_handshake(tls_door: Door, tmp_path: Path) -> None:
    foreign = TestCA(tmp_path / "foreign", "foreign")
    with pytest.raises(ssl.SSLCertVerificationError):
        RawClient("127.0.0.1", tls_door.door.port, tls=foreign.client_context())


def test_mutual_tls_needs_a_certificate_of_the_ca(tmp_path: Path, ca: TestCA) -> None:
    leaf, client = ca.issue("broker"), ca.issue("app")
    tls = TlsConfig(leaf.cert, leaf.key, ca.ca_file, require_client_cert=True)
    with serve_door(tls_config(tmp_path, tls), RemotingCompanion(port=0)) as door:
        answer = call(door, ca.client_context(client), RequestCode.GET_BROKER_CLUSTER_INFO, 1, {})
        assert answer.code == ResponseCode.SUCCESS
        for presented in (None, _foreign_leaf(tmp_path)):
            with pytest.raises((ssl.SSLError, ConnectionError)):  # refused: in the handshake or after it
                call(door, ca.client_context(presented), RequestCode.GET_BROKER_CLUSTER_INFO, 2, {})


def _foreign_leaf(tmp_path: Path) -> LeafFiles:
    return TestCA(tmp_path / "foreign", "foreign").issue("app")


def test_auth_on_refuses_a_plaintext_door_off_loopback(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(USERS)
    config = tls_config(tmp_path, None, auth_file=users)
    refused = RemotingCompanion(port=0, host="0.0.0.0")  # refused before it binds
    with (
        pytest.raises(InvalidArgument, match=r"remoting listener on '0\.0\.0\.0'"),
        serve_door(config, refused),
    ):
        pass
    assert refused.door is None


def test_serve_refuses_a_plaintext_remoting_port_off_loopback_with_auth_on(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text(USERS)
    argv = ["serve", "--store-dir", str(tmp_path / "data"), "--port", "0", "--operators", "off"]
    argv += ["--auth-file", str(users), "--remoting-port", "0", "--remoting-host", "0.0.0.0"]
    result = CliRunner().invoke(app, argv, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert "remoting listener on '0.0.0.0'" in result.output and "--allow-plaintext" in result.output


def test_a_connection_that_never_handshakes_is_closed_after_the_timeout(tmp_path: Path, ca: TestCA) -> None:
    leaf = ca.issue("broker")
    context = TlsConfig(leaf.cert, leaf.key).server_context()
    config = RemotingServerConfig(port=0, ssl_context=context, ssl_handshake_timeout_s=0.5)
    with RemotingServerThread({}, config) as running, RawClient("127.0.0.1", running.port) as silent:
        started = time.monotonic()
        assert silent.closed_by_server()  # it sent nothing, not even a ClientHello
        assert time.monotonic() - started < 5
