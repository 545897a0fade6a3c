"""The committed ``ingest_api/grpc/v2`` modules are exactly what the vendored protos generate."""

from __future__ import annotations

from importlib import metadata

import pytest

from ingest_api.grpc import generate


def test_committed_modules_equal_a_fresh_generation() -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev extra) regenerates the modules")
    committed = generate.committed()
    marker = committed["service_pb2_grpc.py"].split(b"GRPC_GENERATED_VERSION = '")[1]
    generated_by = marker.split(b"'")[0].decode()
    installed = metadata.version("grpcio-tools")
    if installed != generated_by:
        pytest.skip(f"grpcio-tools {installed} installed; the modules were made by {generated_by}")
    fresh = generate.generate()
    assert sorted(fresh) == sorted(committed)
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert stale == [], f"regenerate with python -m ingest_api.grpc.generate: {stale} differ"


def test_generated_modules_import_from_this_package() -> None:
    # protoc writes "from apache.rocketmq.v2 import ..."; the generator points them here.
    for name, contents in generate.committed().items():
        assert b"from apache.rocketmq" not in contents, name
    from ingest_api.grpc.v2 import definition_pb2, service_pb2, service_pb2_grpc

    assert definition_pb2.DESCRIPTOR.name == "apache/rocketmq/v2/definition.proto"
    assert service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods_by_name["Telemetry"]
    assert hasattr(service_pb2_grpc, "add_MessagingServiceServicer_to_server")
