"""A real ``sparkmq serve`` in a subprocess, with its operator job, for the operator tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from broker.operator_job import LOCK_FILE
from broker.operators import lock_holder
from tests.support import reads
from tests.support.network import free_port
from tests.support.waiting import wait_until

#: Spark start-up plus the first stateful batches on a loaded 2-core machine.
JOB_START_TIMEOUT_S = 300.0


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="ascii")
            except OSError:
                continue
            if int(stat.split(") ", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


@dataclass
class Broker:
    process: subprocess.Popen[bytes]
    url: str
    store_dir: Path
    checkpoint_dir: Path
    log_path: Path

    @property
    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    def operators(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/operators", timeout=10).json()
        return result

    def delay_operator(self) -> dict[str, Any]:
        found = [op for op in self.operators()["operators"] if op["operator"] == "delay"]
        return found[0] if found else {}

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 90) -> int:
        """Stop the broker with ``sig``. After a SIGKILL its operator job outlives it (the
        grace, waiting to be adopted): a test's teardown ends that job too (:meth:`end_job`)."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        if sig == signal.SIGKILL:
            self.end_job()
        return code

    def end_job(self) -> None:
        """SIGKILL the operator job a killed broker left holding its lock (its JVM follows it)."""
        lock = self.checkpoint_dir / "operators" / LOCK_FILE
        holder = lock_holder(lock)
        if holder is not None and holder["pid"] is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(holder["pid"], signal.SIGKILL)
            wait_until(lambda: lock_holder(lock) is None, 30, "the orphaned operator job to die")


def start_broker(
    tmp_path: Path,
    *,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    port: int | None = None,
    wait_healthy: bool = True,
    queries: str | None = None,
) -> Broker:
    """``wait_healthy`` False: return at once (a broker expected to crash during start-up);
    ``queries``: the resolvers its operator job runs (``--operator-queries``; ``None``: all). A
    test runs only the ones it exercises: each idle one takes a share of the two cores."""
    port = port or free_port()
    store_dir, checkpoint_dir = tmp_path / "store", tmp_path / "checkpoints"
    log_path = tmp_path / f"broker-{port}-{time.monotonic_ns()}.log"
    command = [
        sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", str(store_dir), "--port", str(port),
        "--checkpoint-dir", str(checkpoint_dir), "--log-level", "warning", *extra_args,
    ]  # fmt: skip
    if queries is not None:
        command += ["--operator-queries", queries]
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    broker = Broker(process, f"http://127.0.0.1:{port}", store_dir, checkpoint_dir, log_path)

    def healthy() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"broker exited with {process.returncode}: {log_path.read_text()[-3000:]}")
        try:
            return httpx.get(f"{broker.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    if wait_healthy:
        wait_until(healthy, 60, "the broker to answer /healthz")
    return broker


def all_messages(broker: Broker, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic``, all queues (JSON pull)."""
    with broker.http as http:
        return reads.all_messages(http, topic)
