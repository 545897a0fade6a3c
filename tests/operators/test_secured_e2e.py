"""The operator job on a secured broker, end to end: a real ``sparkmq serve`` with ``--auth-file``,
HTTPS (``--tls-cert/--tls-key/--tls-ca``, a test CA) and a broker credential, its operator job
(real local Spark) reaching it over verified HTTPS as the broker itself; a delayed message
produced with a user's token is delivered once, and no secret reaches a log or a command line."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from broker.security import User, hash_token
from tests.operators.broker_process import JOB_START_TIMEOUT_S
from tests.support.network import free_port
from tests.support.secure_broker import TOKENS, default_users, write_users_file
from tests.support.tls import TestCA
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.spark]

BROKER_NAME, BROKER_SECRET = "broker-1", "broker-secret-xyzzy-0b7d41c9e3"


@dataclass
class SecuredServe:
    process: subprocess.Popen[bytes]
    url: str
    context: ssl.SSLContext
    log_path: Path
    job_log: Path

    def client(self, token: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, verify=self.context, timeout=30)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[SecuredServe]:
    ca = TestCA(tmp_path / "tls")
    leaf = ca.issue("broker")
    broker_user = User(BROKER_NAME, token_hashes=(hash_token(BROKER_SECRET),), broker=True)
    users = write_users_file(tmp_path / "users.json", [*default_users(), broker_user])
    peer = tmp_path / "broker.peer"
    peer.write_text(f"{BROKER_NAME}:{BROKER_SECRET}\n")
    peer.chmod(0o600)
    port, log_path = free_port(), tmp_path / "broker.log"
    command = [
        sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", str(tmp_path / "store"),
        "--port", str(port), "--checkpoint-dir", str(tmp_path / "checkpoints"), "--log-level", "warning",
        "--auth-file", str(users), "--tls-cert", str(leaf.cert), "--tls-key", str(leaf.key),
        "--tls-ca", str(ca.ca_file), "--peer-credential-file", str(peer), "--operator-queries", "delay",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKMQ_TOKEN", "SPARKMQ_TLS_CA")}
    with open(log_path, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    running = SecuredServe(
        process,
        f"https://127.0.0.1:{port}",
        ca.client_context(),
        log_path,
        tmp_path / "checkpoints" / "operators" / "operator-job.log",
    )

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"broker exited with {process.returncode}: {log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{running.url}/healthz", verify=running.context, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, 60, "the broker to answer /healthz over HTTPS")
        yield running
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _messages(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    described = client.get(f"/topics/{topic}")
    if described.status_code == 404:
        return []
    described.raise_for_status()
    out: list[dict[str, Any]] = []
    for queue in described.json()["queue_offsets"]:
        page = client.get(
            f"/topics/{topic}/queues/{queue['queue_id']}/messages",
            params={"offset": queue["min_offset"], "max_messages": 1000},
        )
        page.raise_for_status()
        out.extend(page.json()["messages"])
    return out


def test_a_delayed_message_is_delivered_once_by_the_job_of_a_secured_broker(serve: SecuredServe) -> None:
    with serve.client(TOKENS["alice"]) as alice, serve.client(TOKENS["admin"]) as admin:
        produced = alice.post("/topics/orders/messages", json={"body": "later", "delay_level": 1})
        assert produced.status_code == 201, produced.text
        parked = produced.json()
        assert parked["topic"] == "SCHEDULE_TOPIC_XXXX"

        def delivered() -> list[dict[str, Any]]:  # empty (falsy) until it is there
            return [m for m in _messages(alice, "orders") if m["uniq_key"] == parked["uniq_key"]]

        got = wait_until(delivered, JOB_START_TIMEOUT_S, "the delayed message in orders", poll_s=0.5)
        assert len(got) == 1 and got[0]["body"] == "later"
        assert got[0]["store_timestamp"] >= parked["store_timestamp"] + 1000, "delivered early"
        report = admin.get("/operators").json()
    job = report["job"]
    assert job["running"] and job["restarts"] == 0, f"the job was refused or crashed: {job}"
    delay = [op for op in report["operators"] if op["operator"] == "delay"]
    assert delay and delay[0]["state"] == "active", "the job's status reports reach the broker"
    cmdline = Path(f"/proc/{job['pid']}/cmdline").read_bytes()
    assert b"https://127.0.0.1" in cmdline and BROKER_SECRET.encode() not in cmdline
    assert f"SPARKMQ_TOKEN={BROKER_SECRET}".encode() in Path(f"/proc/{job['pid']}/environ").read_bytes()
    serve.process.send_signal(signal.SIGTERM)
    assert serve.process.wait(90) == 0
    logs = serve.job_log.read_text(errors="replace") + serve.log_path.read_text(errors="replace")
    assert "operator delay batch" in logs, "the job's log is the one searched"
    for secret in (BROKER_SECRET, TOKENS["alice"], TOKENS["admin"]):
        assert secret not in logs
