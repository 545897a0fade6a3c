"""The deployment files hold together (docker-compose.yml cannot be run on the test machine, so
its wiring is checked as data): every package is copied into the image, every dependency
waits on a healthcheck that exists, and each cluster broker listens, is published, is checked
and advertises itself on one port under its service name."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services: dict[str, Any] = document["services"]
    return services


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_image_copies_every_package() -> None:
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (ROOT / "Dockerfile").read_text(), re.MULTILINE))
    assert {p.rstrip("*") for p in packages["include"]} <= copied


def test_dependencies_wait_on_healthchecks_that_exist() -> None:
    services = _compose()
    for name, service in services.items():
        for needed, condition in (service.get("depends_on") or {}).items():
            assert needed in services, f"{name} depends on unknown {needed}"
            if condition.get("condition") == "service_healthy":
                assert "healthcheck" in services[needed], f"{name} waits on {needed}: no healthcheck"
            if "cluster" in services[needed].get("profiles", []):
                assert "cluster" in service.get("profiles", []), f"{name} runs without the cluster it needs"


def test_cluster_brokers_listen_publish_check_and_advertise_one_port() -> None:
    services = _compose()
    brokers = {name: s for name, s in services.items() if name.startswith("broker-")}
    assert len(brokers) == 4  # two replica groups of two, as make cluster runs
    names: dict[str, int] = {}
    ha_ports = set()
    for service_name, service in brokers.items():
        command = service["command"]
        port = _flag(command, "--port")
        assert service["ports"] == [f"127.0.0.1:{port}:{port}"]
        assert f"127.0.0.1:{port}/healthz" in " ".join(service["healthcheck"]["test"])
        assert _flag(command, "--advertise-host") == service_name
        assert _flag(command, "--cluster") == "zk://zookeeper:2181/sparkmq"
        assert service["profiles"] == ["cluster"]
        name = _flag(command, "--broker-name")
        names[name] = names.get(name, 0) + 1
        ha_ports.add(_flag(command, "--ha-port"))
        operators = services[f"operators-{service_name.removeprefix('broker-')}"]
        assert _flag(operators["command"], "--endpoint") == f"http://{service_name}:{port}"
    assert names == {"b1": 2, "b2": 2}
    assert len(ha_ports) == 4, "each member replicates on a port of its own"
    volumes = [v for s in brokers.values() for v in s["volumes"]]
    assert len(set(volumes)) == 4, "each member has a store volume of its own"
    assert services["zookeeper"]["image"] == "zookeeper:3.8"


def test_the_cluster_profile_runs_zookeeper_with_digest_acls() -> None:
    services = _compose()
    assert "enforce.auth.enabled=true" in services["zookeeper"]["environment"]["ZOO_CFG_EXTRA"]
    for name, service in services.items():
        if name.startswith("broker-"):  # every member (the YAML anchor's environment) authenticates
            assert service["environment"]["SPARKMQ_ZK_AUTH"] == "sparkmq:${SPARKMQ_ZK_PASSWORD:-}"
