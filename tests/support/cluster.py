"""A real cluster for multi-process tests: one ZooKeeper and ``sparkmq serve --cluster``
processes on 127.0.0.1, each with its own store directory and ports.

Faults are signals on real processes: :meth:`ProcessBroker.kill` (``kill -9``),
:meth:`ProcessBroker.pause` / :meth:`ProcessBroker.resume` (``SIGSTOP``/``SIGCONT``) and
:meth:`ProcessCluster.restart`; ZooKeeper itself can be stopped and started again. Tests using
it are marked ``cluster`` (``make test-fast`` skips them).

    with ProcessCluster.started(tmp_path, ["b1", "b2", "b3"]) as cluster:
        cluster.http("b1").put("/topics/t", json={"queues": 6})
        cluster.brokers["b2"].kill()
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cluster.local_zookeeper import LocalZooKeeper
from tests.support.network import free_port
from tests.support.waiting import wait_until

#: Session timeout the test brokers ask for (a killed broker is seen dead after about this).
TEST_SESSION_TIMEOUT_MS = 2000


@dataclass
class ProcessBroker:
    """One ``sparkmq serve --cluster`` process (restartable on the same ports and store)."""

    name: str
    store_dir: Path
    log_dir: Path
    port: int
    kafka_port: int | None
    ha_port: int | None
    args: tuple[str, ...]
    env: dict[str, str]
    session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS
    #: ``--cluster`` for this broker only (e.g. through a proxy that can cut it from
    #: ZooKeeper); ``None``: the cluster's.
    zk_url: str | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def http(self, timeout_s: float = 30.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout_s)

    @property
    def checkpoint_dir(self) -> Path:
        """Its ``--checkpoint-dir`` (the operator job's checkpoints and log)."""
        return self.store_dir.parent / f"checkpoints-{self.name}"

    def command(self, zk_url: str) -> list[str]:
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve",
            "--store-dir", str(self.store_dir), "--port", str(self.port),
            "--cluster", zk_url, "--broker-name", self.name,
            "--session-timeout-ms", str(self.session_timeout_ms),
            "--checkpoint-dir", str(self.checkpoint_dir),
            "--log-level", "warning",
        ]  # fmt: skip
        if self.kafka_port is not None:
            command += ["--kafka-port", str(self.kafka_port)]
        if self.ha_port is not None:
            command += ["--ha-port", str(self.ha_port)]
        return command + list(self.args)

    def start(self, zk_url: str, wait: bool = True) -> ProcessBroker:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{self.name}-{time.monotonic_ns()}.log"
        with open(self.log_path, "wb") as out:
            self.process = subprocess.Popen(
                self.command(self.zk_url or zk_url),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        def healthy() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"broker {self.name} exited with {self.process.returncode}: {self.log_tail()}"
                )
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_until(healthy, timeout_s, f"broker {self.name} to answer /healthz")
        except AssertionError as exc:  # say what the broker was doing (its log goes with its temp dir)
            raise AssertionError(f"{exc}\n--- its log's tail ---\n{self.log_tail()}") from None

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path else ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """``kill -9`` of the broker's whole process group (its operator job included)."""
        if self.alive:
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def pause(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """A clean stop (SIGTERM), SIGKILL after ``timeout_s``."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode


@dataclass
class ProcessCluster:
    """ZooKeeper plus named broker processes under ``root``."""

    root: Path
    zookeeper: LocalZooKeeper
    chroot: str = "/sparkmq"
    brokers: dict[str, ProcessBroker] = field(default_factory=dict)
    #: The ZooKeeper session timeout every broker of this cluster asks for.
    session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS

    @property
    def zk_url(self) -> str:
        return self.zookeeper.url(self.chroot)

    @classmethod
    @contextmanager
    def started(
        cls,
        root: Path,
        names: Sequence[str],
        *,
        kafka: bool = False,
        args: Sequence[str] = ("--operators", "off"),
        env: dict[str, str] | None = None,
        zookeeper: LocalZooKeeper | None = None,
        session_timeout_ms: int = TEST_SESSION_TIMEOUT_MS,
        more_args: Mapping[str, Sequence[str]] | None = None,
    ) -> Iterator[ProcessCluster]:
        """``more_args``: arguments added to ``args`` for the brokers it names."""
        own_zk = zookeeper is None
        zk = zookeeper or LocalZooKeeper(root / "zookeeper", free_port()).start()
        cluster = cls(root, zk, chroot=f"/c{time.monotonic_ns()}", session_timeout_ms=session_timeout_ms)
        try:
            for name in names:
                own = (*args, *(more_args or {}).get(name, ()))
                cluster.add(name, kafka=kafka, args=own, env=env, wait=False)
            for broker in cluster.brokers.values():
                broker.wait_healthy()
            cluster.wait_live(len(names))
            yield cluster
        except BaseException:
            print(cluster.diagnosis())  # captured: shown with the failure
            raise
        finally:
            for broker in cluster.brokers.values():
                if broker.alive:
                    broker.resume()
                    broker.stop(timeout_s=20)
            if own_zk:
                zk.stop()

    def add(
        self,
        name: str,
        *,
        kafka: bool = False,
        ha: bool = False,
        args: Sequence[str] = ("--operators", "off"),
        env: dict[str, str] | None = None,
        wait: bool = True,
        member: str | None = None,
        zk_url: str | None = None,
    ) -> ProcessBroker:
        """Start broker ``name`` (``member`` names a second process of the same name: a replica;
        ``zk_url``: its own ``--cluster``, e.g. through a proxy)."""
        key = member or name
        broker = ProcessBroker(
            name=name,
            store_dir=self.root / key / "store",
            log_dir=self.root / "logs",
            port=free_port(),
            kafka_port=free_port() if kafka else None,
            ha_port=free_port() if ha else None,
            args=tuple(args),
            env=dict(env or {}),
            session_timeout_ms=self.session_timeout_ms,
            zk_url=zk_url,
        )
        self.brokers[key] = broker
        if not wait:
            return broker.start(self.zk_url, wait=False)
        for attempt in range(3):
            try:
                return broker.start(self.zk_url)
            except AssertionError:
                # free_port() is free a moment before the broker binds: another process on this
                # busy machine may take it first. A first start may move to fresh ports.
                if attempt == 2 or "address already in use" not in broker.log_tail():
                    raise
                broker.port = free_port()
                broker.kafka_port = free_port() if kafka else None
                broker.ha_port = free_port() if ha else None
        raise AssertionError("unreachable")

    def http(self, key: str) -> httpx.Client:
        return self.brokers[key].http()

    def diagnosis(self, chars: int = 3000, job_lines: int = 40) -> str:
        """What a failed test shows: each broker's log tail, and its operator job's own lines
        (its starts, batches, restarts and errors, without Spark's stack frames)."""
        parts = []
        for key, broker in self.brokers.items():
            alive = "alive" if broker.alive else f"exited {broker.process and broker.process.returncode}"
            parts.append(f"--- broker {key} ({alive}): log tail ---\n{broker.log_tail(chars)}")
        for key, broker in self.brokers.items():
            job_log = broker.checkpoint_dir / "operators" / "operator-job.log"
            if not job_log.exists():
                continue
            lines = job_log.read_text(errors="replace").splitlines()
            own = [line for line in lines if "sparkmq" in line or " ERROR " in line or "Error" in line[:120]]
            own = [line[:300] for line in own if not line.lstrip().startswith("at ")]
            parts.append(f"--- broker {key}: its operator job ---\n" + "\n".join(own[-job_lines:]))
        return "\n".join(parts)

    def restart(self, key: str) -> ProcessBroker:
        return self.brokers[key].start(self.zk_url)

    def describe(self, via: str) -> dict[str, Any]:
        with self.http(via) as http:
            answer: dict[str, Any] = http.get("/cluster").json()
            return answer

    def roles(self, via: str, name: str = "b1") -> dict[int, str]:
        """member id -> role of replica group ``name``, as ``via`` sees it."""
        group = next(b for b in self.describe(via)["brokers"] if b["name"] == name)
        return {m["member_id"]: m["role"] for m in group.get("members") or []}

    def pair_in_sync(self, via: str, name: str = "b1") -> bool:
        """Whether ``via`` sees group ``name`` as a master and a slave, both in sync."""
        group = next(b for b in self.describe(via)["brokers"] if b["name"] == name)
        return sorted(self.roles(via, name).values()) == ["master", "slave"] and len(group["in_sync"]) == 2

    def wait_live(self, count: int, via: str | None = None, timeout_s: float = 30.0) -> None:
        """``via`` (default: every running broker) sees ``count`` live broker names."""
        keys = [via] if via else [key for key, broker in self.brokers.items() if broker.alive]
        for key in keys:
            wait_until(
                lambda key=key: sum(b["alive"] for b in self.describe(key)["brokers"]) == count,
                timeout_s,
                f"{key} to see {count} live brokers",
            )
