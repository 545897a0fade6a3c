"""``sparkmq cluster zookeeper`` and ``sparkmq cluster local`` (what ``make cluster`` runs) as
real processes: they start, serve, and stop cleanly on a signal. Marked ``cluster``."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from cluster.local_zookeeper import is_ready
from sparkmq.cli.local_cluster import LocalCluster
from sparkmq.client import Client
from tests.support.network import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster


def _free_pair() -> int:
    """A port p with p and p + 1 both free a moment ago."""
    for _ in range(100):
        base = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
        return base
    raise AssertionError("no two consecutive free ports")


def _closed(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _line(process: subprocess.Popen[str], wanted: str) -> str:
    """The output read up to and including the line containing ``wanted`` ('' at the end)."""
    assert process.stdout is not None
    seen = ""
    for line in process.stdout:
        seen += line
        if wanted in line:
            return seen
    return ""


def _run(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sparkmq.cli", "cluster", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def test_the_local_cluster_plan() -> None:
    plan = LocalCluster(Path("/tmp/c"), brokers=3, first_port=9001, zk_port=2999, kafka_first_port=9101)
    assert plan.validate().names == ["b1", "b2", "b3"]
    argv = plan.serve_argv("b2")
    assert argv[argv.index("--port") + 1] == "9002" and argv[argv.index("--kafka-port") + 1] == "9102"
    assert argv[argv.index("--cluster") + 1] == "zk://127.0.0.1:2999/sparkmq"
    assert argv[argv.index("--store-dir") + 1] == "/tmp/c/b2/store"
    with pytest.raises(ValueError, match="--operators"):
        LocalCluster(Path("/tmp/c"), operators="remote").validate()


def test_cluster_zookeeper_runs_in_the_foreground_until_sigterm(tmp_path: Path) -> None:
    port = free_port()
    process = _run("zookeeper", "--port", str(port), "--data-dir", str(tmp_path / "zk"))
    try:
        wait_until(lambda: is_ready(port), 60, "ZooKeeper to answer ruok")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert "ZooKeeper stopped" in output and _closed(port)


def test_cluster_local_starts_brokers_and_brings_them_back(tmp_path: Path) -> None:
    base, zk_port = _free_pair(), free_port()
    args = ("local", "--brokers", "2", "--port", str(base), "--zk-port", str(zk_port), "--operators", "off",
            "--dir", str(tmp_path))  # fmt: skip
    first = f"http://127.0.0.1:{base}"

    def live() -> bool:
        try:
            brokers = httpx.get(f"{first}/cluster", timeout=2).json()["brokers"]
        except httpx.HTTPError:
            return False
        return [(b["name"], b["alive"]) for b in brokers] == [("b1", True), ("b2", True)]

    process = _run(*args)
    try:
        wait_until(live, 120, "two live brokers")
        announced = wait_until(lambda: _line(process, "Ctrl-C stops the cluster"), 60, "the announcement")
        assert f"broker b2 on http://127.0.0.1:{base + 1}" in announced
        with Client(first) as client:
            client.create_topic("tour", 4)
            stored = [client.send("tour", f"m{q}", queue_id=q) for q in range(4)]
            assert [r.broker for r in stored] == ["b1", "b2", "b1", "b2"]
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    assert "stopped" in output and _closed(base) and _closed(base + 1) and _closed(zk_port)
    assert (tmp_path / "logs" / "b2.log").is_file()

    again = _run(*args)
    try:
        # A broker is alive in ZooKeeper from its startup, before its HTTP port listens (uvicorn
        # binds after the lifespan): the announcement comes once every broker answers /healthz.
        wait_until(lambda: _line(again, "Ctrl-C stops the cluster"), 120, "the announcement again")
        wait_until(live, 120, "the same two brokers again")
        with Client(first) as client:
            assert [q.broker for q in client.route("tour").queues] == ["b1", "b2", "b1", "b2"]
            assert [m.text for m in client.pull("tour", 3, 0).messages] == ["m3"]
    finally:
        again.send_signal(signal.SIGINT)
        again.communicate(timeout=120)
    assert again.returncode == 0


def test_cluster_local_secure_runs_a_secured_replicated_cluster(tmp_path: Path) -> None:
    """``make cluster SECURE=1``: auth on, broker identities, ZooKeeper ACLs, HA over mutual TLS."""
    base, zk_port = _free_pair(), free_port()
    secure = tmp_path / "secure"
    args = ("local", "--brokers", "1", "--replicas", "2", "--replication", "sync", "--port", str(base),
            "--zk-port", str(zk_port), "--operators", "off", "--dir", str(tmp_path),
            "--secure", str(secure))  # fmt: skip
    first = f"http://127.0.0.1:{base}"
    process = _run(*args)
    try:
        announced = wait_until(lambda: _line(process, "Ctrl-C stops the cluster"), 180, "the announcement")
        token = (secure / "admin.token").read_text().strip()
        assert f"admin token (kept in {secure / 'admin.token'}): {token}" in announced
        assert httpx.get(f"{first}/cluster", timeout=5).status_code == 401
        headers = {"authorization": f"Bearer {token}"}

        def in_sync() -> bool:
            group = httpx.get(f"{first}/cluster", headers=headers, timeout=5).json()["brokers"][0]
            return len(group.get("in_sync") or []) == 2

        wait_until(in_sync, 60, "both members in sync over mutual TLS")
        with Client(f"http://127.0.0.1:{base + 1}", token=token) as client:  # through the slave
            client.create_topic("tour", 2)
            assert client.send("tour", "hello", queue_id=0).broker == "b1"
        assert {p.name for p in secure.iterdir()} >= {
            "ca.pem",
            "users.json",
            "zk-auth",
            "b1-1.pem",
            "b1-2.peer",
        }
        assert oct((secure / "zk-auth").stat().st_mode)[-3:] == "600"
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output
    password = (secure / "zk-auth").read_text().strip().split(":", 1)[1]
    for log in (tmp_path / "logs").iterdir():
        assert password not in log.read_text(errors="replace")
