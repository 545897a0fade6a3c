"""The OpenAPI document is the contract: schemathesis runs all of its checks against a live broker.

``schemathesis run <broker>/openapi.json -c all`` with a fixed seed and a bounded number of
examples per operation, in its own process (the CLI: every phase, coverage, fuzzing and
stateful), against a real uvicorn broker on a temporary store, once with auth off and once
with ``--auth-file`` (an admin token, given as ``Authorization``). Any finding fails the test
and its report is the failure message. ``tests/ingest/schemathesis_hooks.py`` teaches it NDJSON
and Arrow bodies and the two rules JSON Schema cannot state; ``tests/ingest/schemathesis.toml``
counts a 413 as a refusal.

New operations join by being in the document (the cluster routes will, once they land).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from broker.config import ServerConfig
from tests.support.stores import light_config

from .conftest import RunningBroker, start_broker

# A few minutes of fuzzing: in `make test`, not in `make test-fast`.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SEED = 25
#: Test cases per operation and phase (the coverage phase adds its boundary cases).
MAX_EXAMPLES = 10
#: Short names the generator produces first: with data in them, fuzzed requests reach the store.
SEEDED_TOPICS = ("0", "00", "A", "a", "_", "-", "%", "|")
ADMIN_TOKEN = "contract-test-admin"


def _seed(http: httpx.Client) -> None:
    for name in SEEDED_TOPICS:
        assert http.put(f"/topics/{name}", json={"queues": 2}).status_code == 201
        batch = {"messages": [{"body": f"m{i}", "keys": ["0"], "tags": "0"} for i in range(4)]}
        assert http.post(f"/topics/{name}/messages:batch", json=batch).status_code == 201
        assert http.put("/groups/0/offsets", json={"topic": name, "offsets": {"0": 1}}).status_code == 200


def _schemathesis(broker: RunningBroker, report_dir: Path, *headers: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(HERE / "schemathesis.toml")]
    command += ["run", f"{broker.url}/openapi.json", "--checks", "all", "--seed", str(SEED)]
    command += ["--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--request-timeout", "30"]
    command += ["--report", "junit", "--report-dir", str(report_dir)]
    for header in headers:
        command += ["--header", header]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.ingest.schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    # Run in the report directory: schemathesis keeps a cache of past findings where it runs.
    report_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        command, check=False, cwd=report_dir, env=env, capture_output=True, text=True, timeout=900
    )


def _assert_no_findings(result: subprocess.CompletedProcess[str]) -> None:
    summary = result.stdout[result.stdout.rfind("SUMMARY") :] if "SUMMARY" in result.stdout else ""
    assert result.returncode == 0, f"schemathesis found problems:\n{result.stdout[-20_000:]}\n{result.stderr}"
    assert "Tested:" in summary and "passed" in summary, result.stdout[-5_000:]


def _broker(tmp_path: Path, auth_file: Path | None = None) -> RunningBroker:
    """A broker whose limits keep the coverage phase's boundary cases small (a batch of
    ``maxItems`` entries, a body of ``maxLength`` characters); the document states them."""
    store = light_config(tmp_path / "store", max_message_size_bytes=64 << 10)
    return start_broker(ServerConfig(store=store, auth_file=auth_file, max_batch_messages=200))


def test_the_server_keeps_the_contract_with_auth_off(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    try:
        with broker.client() as http:
            _seed(http)
            document = http.get("/openapi.json").json()
        assert document["security"] == [{}, {"bearerAuth": []}]
        assert (
            document["components"]["schemas"]["ProduceBatchIn"]["properties"]["messages"]["maxItems"] == 200
        )
        _assert_no_findings(_schemathesis(broker, tmp_path / "report"))
    finally:
        broker.stop()


def test_the_server_keeps_the_contract_with_auth_on(tmp_path: Path) -> None:
    auth_file = tmp_path / "tokens.json"
    grants = {"admin": ["*"], "produce": ["*"], "consume": ["*"]}
    auth_file.write_text(json.dumps({"tokens": [{"name": "admin", "token": ADMIN_TOKEN, **grants}]}))
    broker = _broker(tmp_path, auth_file)
    try:
        with broker.client(token=ADMIN_TOKEN) as http:
            _seed(http)
            assert http.get("/openapi.json").json()["security"] == [{"bearerAuth": []}]
        _assert_no_findings(
            _schemathesis(broker, tmp_path / "report", f"Authorization: Bearer {ADMIN_TOKEN}")
        )
    finally:
        broker.stop()


@pytest.mark.cluster
def test_a_cluster_broker_keeps_the_contract(tmp_path: Path) -> None:
    """The same run against b1 of a two-broker cluster: produce forwarded to b2, pulls of b2's
    queues redirected (307), lookups and groups asked of both brokers."""
    from cluster.local_zookeeper import LocalZooKeeper
    from tests.cluster.inprocess import InProcessCluster
    from tests.support.network import free_port

    zookeeper = LocalZooKeeper(tmp_path / "zk", free_port()).start()
    cluster = InProcessCluster(zookeeper.url("/contract"), tmp_path)
    try:
        limits = {"max_batch_messages": 200}
        b1 = cluster.start("b1", **limits)
        cluster.start("b2", **limits)
        cluster.wait_converged(2)
        with b1.client() as http:
            _seed(http)
        _assert_no_findings(_schemathesis(b1, tmp_path / "report"))
    finally:
        cluster.stop_all()
        zookeeper.stop()
