"""The gRPC door behind ``--tls-cert/--tls-key``: TLS only (``grpc.ssl_server_credentials``).

A real broker (uvicorn over HTTPS, the store, the broker core) with its gRPC door on a free
port and certificates of a test CA. RocketMQ 5's official Python client, with ``tls_enable``
and the test CA as gRPC's default roots (``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``), sends and
receives; a plaintext channel, a client trusting another CA and, under
``--tls-require-client-cert``, a client without a certificate all fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from broker.config import ServerConfig
from broker.lifecycle import running_broker
from broker.tls import TlsConfig
from ingest_api.grpc.companion import GrpcCompanion
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from ingest_api.grpc.v2 import service_pb2_grpc
from store import InvalidArgument
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.rocketmq5 import run_client
from tests.support.stores import light_config
from tests.support.tls import LeafFiles, TestCA

META = (("x-mq-client-id", "tls-test@1"),)


def start_tls_door(tmp_path: Path, tls: TlsConfig) -> tuple[RunningBroker, GrpcCompanion]:
    companion = GrpcCompanion(port=0)
    config = ServerConfig(store=light_config(tmp_path / "store"), tls=tls)
    return start_broker(config, companions=[companion]), companion


@pytest.fixture
def ca(tmp_path: Path) -> TestCA:
    return TestCA(tmp_path / "tls")


@pytest.fixture
def endpoint(tmp_path: Path, ca: TestCA) -> Iterator[str]:
    leaf = ca.issue("broker")
    running, companion = start_tls_door(tmp_path, TlsConfig(leaf.cert, leaf.key))
    try:
        assert companion.door is not None
        yield f"127.0.0.1:{companion.door.port}"
    finally:
        running.stop()


def query_route(channel: grpc.Channel) -> spb.QueryRouteResponse:
    stub = service_pb2_grpc.MessagingServiceStub(channel)  # type: ignore[no-untyped-call]
    request = spb.QueryRouteRequest(topic=pb.Resource(name="T"), endpoints=pb.Endpoints())
    answer: spb.QueryRouteResponse = stub.QueryRoute(request, metadata=META, timeout=5)
    return answer


def credentials(ca: TestCA, leaf: LeafFiles | None = None) -> grpc.ChannelCredentials:
    if leaf is None:
        return grpc.ssl_channel_credentials(ca.ca_file.read_bytes())
    return grpc.ssl_channel_credentials(
        ca.ca_file.read_bytes(), leaf.key.read_bytes(), leaf.cert.read_bytes()
    )


def test_the_official_client_sends_and_receives_over_tls(
    endpoint: str, ca: TestCA, rocketmq5: Path, tmp_path: Path
) -> None:
    bodies = [f"secret-{i}" for i in range(3)]
    argument = {"endpoint": endpoint, "topic": "tls-jobs", "group": "tls-workers", "bodies": bodies}
    roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(ca.ca_file)}
    lines = run_client(
        "tls_round_trip.py", {**argument, "tls": True, "timeout_s": 30}, tmp_path / "home", 90, roots
    )
    assert len([line for line in lines if "sent" in line]) == 3
    assert sorted(line["received"] for line in lines if "received" in line) == bodies
    assert lines[-1] == {"done": 3}


def test_plaintext_and_foreign_ca_clients_fail(endpoint: str, tmp_path: Path) -> None:
    with grpc.insecure_channel(endpoint) as plain, pytest.raises(grpc.RpcError) as refused:
        query_route(plain)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    foreign = TestCA(tmp_path / "foreign", "foreign")
    with (
        grpc.secure_channel(endpoint, credentials(foreign)) as channel,
        pytest.raises(grpc.RpcError) as untrusted,
    ):
        query_route(channel)
    assert untrusted.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls-without-the-ca-in-its-roots"])
def test_the_official_client_fails_without_tls_or_without_trusting_the_ca(
    endpoint: str, tls: bool, rocketmq5: Path, tmp_path: Path
) -> None:
    argument = {"endpoint": endpoint, "topic": "T", "group": "G", "bodies": ["x"], "tls": tls, "timeout_s": 5}
    lines = run_client("tls_round_trip.py", argument, tmp_path / "home", 90)
    assert lines == [{"failed": "failed to fetch topic:T route."}]  # its QueryRoute found no server


def test_mutual_tls_needs_a_certificate_of_the_ca(tmp_path: Path, ca: TestCA) -> None:
    leaf, client = ca.issue("broker"), ca.issue("app")
    tls = TlsConfig(leaf.cert, leaf.key, ca.ca_file, require_client_cert=True)
    running, companion = start_tls_door(tmp_path, tls)
    try:
        assert companion.door is not None
        endpoint = f"127.0.0.1:{companion.door.port}"
        with grpc.secure_channel(endpoint, credentials(ca, client)) as channel:
            assert query_route(channel).status.code != 0  # answered (topic T does not exist)
        with grpc.secure_channel(endpoint, credentials(ca)) as channel, pytest.raises(grpc.RpcError):
            query_route(channel)
    finally:
        running.stop()


def test_auth_on_refuses_a_plaintext_door_off_loopback(tmp_path: Path) -> None:
    users = tmp_path / "users.json"
    users.write_text('{"tokens": [{"name": "ops", "token": "ops-token-1234", "admin": ["*"]}]}')
    config = ServerConfig(store=light_config(tmp_path / "store"), auth_file=users).validate()
    refused = GrpcCompanion(port=0, host="0.0.0.0")  # refused before it binds

    async def start() -> None:
        async with running_broker(config, companions=[refused]):
            pass

    with pytest.raises(InvalidArgument, match=r"gRPC listener on '0\.0\.0\.0'"):
        asyncio.run(start())
    assert refused.door is None
