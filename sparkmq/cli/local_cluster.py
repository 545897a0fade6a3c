"""``sparkmq cluster local``: ZooKeeper and N brokers on 127.0.0.1 in the foreground (``make cluster``).

For trying a cluster on one machine, not for production. Under ``--dir``::

    zookeeper/          ZooKeeper's data, zoo.cfg and zookeeper.log
    b1/store/           broker b1's store; b1/checkpoints/ its operator job's checkpoints
    logs/b1.log         broker b1's output (and so on for b2, b3, ...)

Broker i (from 1) is ``b<i>`` on HTTP port ``--port + i - 1`` (and Kafka port ``--kafka-port + i
- 1`` when given), joined to ``zk://127.0.0.1:<zk-port>/sparkmq``. Everything is kept between
runs: a second run brings back the same brokers with their queues. A broker that exits is
reported with the command that restarts it, and the others keep running (kill one to watch its
queues become unavailable). Ctrl-C or SIGTERM stops the brokers cleanly, then ZooKeeper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

import httpx
import typer

from cluster.errors import ClusterError
from cluster.local_zookeeper import LocalZooKeeper, ZooKeeperMissing
from sparkmq.cli import local_secure
from sparkmq.cli.cluster import stop_on_signals
from sparkmq.cli.common import Exit, fail
from sparkmq.cli.local_secure import SecureFiles
from sparkmq.cli.root import cluster_app

#: ZooKeeper chroot of the local cluster.
CHROOT = "/sparkmq"
#: How long a broker may take to answer /healthz after it starts.
START_TIMEOUT_S = 120.0
#: How long a broker may take to stop after SIGTERM before it is killed.
STOP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class LocalCluster:
    """What ``cluster local`` runs (pure: the commands and paths, no processes)."""

    root: Path
    brokers: int = 3
    first_port: int = 8081
    zk_port: int = 2181
    kafka_first_port: int | None = None
    operators: str = "local"
    #: Members per broker name: with more than one, each name is a replica group (``b1-1``,
    #: ``b1-2``, ...: same ``--broker-name``, each with an ``--ha-port``).
    replicas: int = 1
    replication: str = "async"
    #: ``--secure DIR``: auth, broker identities, ZooKeeper ACLs, replication mTLS
    #: (:mod:`sparkmq.cli.local_secure`); ``None``: everything open, as before.
    secure: SecureFiles | None = None

    def validate(self) -> LocalCluster:
        if not 1 <= self.brokers <= 9:
            raise ValueError(f"--brokers must be 1 to 9, got {self.brokers}")
        if not 1 <= self.replicas <= 5:
            raise ValueError(f"--replicas must be 1 to 5, got {self.replicas}")
        if self.replication not in ("async", "sync"):
            raise ValueError(f"--replication must be async or sync, got {self.replication!r}")
        if self.operators not in ("local", "off"):
            raise ValueError(f"--operators must be local or off, got {self.operators!r}")
        return self

    @property
    def names(self) -> list[str]:
        """Every process: ``b1, b2, ...``, or ``b1-1, b1-2, b2-1, ...`` with replicas."""
        if self.replicas == 1:
            return [f"b{i}" for i in range(1, self.brokers + 1)]
        return [f"b{i}-{r}" for i in range(1, self.brokers + 1) for r in range(1, self.replicas + 1)]

    @staticmethod
    def broker_name(name: str) -> str:
        """The ``--broker-name`` of process ``name`` (its replica group)."""
        return name.split("-", 1)[0]

    @property
    def zk_url(self) -> str:
        return f"zk://127.0.0.1:{self.zk_port}{CHROOT}"

    def port(self, name: str) -> int:
        return self.first_port + self.names.index(name)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port(name)}"

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def serve_argv(self, name: str) -> list[str]:
        """The ``sparkmq serve`` command line of broker ``name``."""
        argv = [
            sys.executable, "-m", "sparkmq.cli", "serve",
            "--store-dir", str(self.root / name / "store"),
            "--checkpoint-dir", str(self.root / name / "checkpoints"),
            "--host", "127.0.0.1", "--port", str(self.port(name)),
            "--cluster", self.zk_url, "--broker-name", self.broker_name(name),
            "--operators", self.operators,
        ]  # fmt: skip
        if self.replicas > 1:
            argv += ["--ha-port", str(self.port(name) + 100), "--replication", self.replication]
        if self.kafka_first_port is not None:
            argv += ["--kafka-port", str(self.kafka_first_port + self.names.index(name))]
        if self.secure is not None:
            argv += self.secure.serve_args(name, self.replicas > 1)
        return argv

    def environment(self) -> dict[str, str]:
        """The brokers' environment: secured, the operator jobs use the admin's token."""
        env = dict(os.environ)
        if self.secure is not None:
            env["SPARKMQ_TOKEN"] = self.secure.admin_token.read_text().strip()
        return env


class Supervisor:
    """Starts, watches and stops the processes of a :class:`LocalCluster`."""

    def __init__(self, plan: LocalCluster) -> None:
        self.plan = plan
        self.zookeeper = LocalZooKeeper(
            plan.root / "zookeeper", plan.zk_port, enforce_auth=plan.secure is not None
        )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._reported: set[str] = set()

    def start(self) -> None:
        self.zookeeper.start()
        (self.plan.root / "logs").mkdir(parents=True, exist_ok=True)
        for name in self.plan.names:
            with open(self.plan.log(name), "ab") as log:
                self.processes[name] = subprocess.Popen(
                    self.plan.serve_argv(name),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=self.plan.environment(),
                )
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = list(self.plan.names)
        while waiting:
            for name in list(waiting):
                code = self.processes[name].poll()
                if code is not None:
                    raise ClusterError(f"broker {name} exited with {code} while starting:\n{self.tail(name)}")
                if _healthy(self.plan.url(name)):
                    waiting.remove(name)
            if waiting and time.monotonic() > deadline:
                raise ClusterError(f"brokers {', '.join(waiting)} did not answer /healthz in time")
            time.sleep(0.2)

    def tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(self.plan.log(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def watch_once(self) -> list[str]:
        """Messages about brokers that exited since the last call."""
        out = []
        for name, process in self.processes.items():
            code = process.poll()
            if code is not None and name not in self._reported:
                self._reported.add(name)
                out.append(
                    f"broker {name} exited with {code} (log: {self.plan.log(name)}); its queues are "
                    f"unavailable. Restart it with:\n  {' '.join(self.plan.serve_argv(name))}"
                )
        return out

    def stop(self) -> None:
        """SIGTERM every broker (each stops its operator job), wait, then stop ZooKeeper."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
        self.zookeeper.stop()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@cluster_app.command("local")
def cluster_local(
    brokers: Annotated[int, typer.Option(help="How many brokers (b1, b2, ...).")] = 3,
    port: Annotated[int, typer.Option(help="HTTP port of b1; b2 takes the next, and so on.")] = 8081,
    zk_port: Annotated[int, typer.Option(help="ZooKeeper's client port.")] = 2181,
    kafka_port: Annotated[
        int | None, typer.Option(help="Kafka port of b1 (the next for b2, ...); off when absent.")
    ] = None,
    operators: Annotated[str, typer.Option(help="local: each broker runs its operator job; off.")] = "local",
    replicas: Annotated[
        int,
        typer.Option(help="Members per broker name (2+: replica groups, HA ports = HTTP ports + 100)."),
    ] = 1,
    replication: Annotated[str, typer.Option(help="Replica groups: async or sync.")] = "async",
    data_dir: Annotated[
        Path, typer.Option("--dir", help="Stores, checkpoints, ZooKeeper data and logs (kept between runs).")
    ] = Path("cluster-data"),
    secure: Annotated[
        Path | None,
        typer.Option(
            help="A folder for a CA, certificates, users and secrets (made on first use): auth on, broker "
            "identities, ZooKeeper ACLs, mutual TLS on the HA ports (docs/security.md)."
        ),
    ] = None,
) -> None:
    """Run ZooKeeper and a cluster of brokers on 127.0.0.1 in the foreground until Ctrl-C."""
    try:
        plan = LocalCluster(
            data_dir.resolve(), brokers, port, zk_port, kafka_port, operators, replicas, replication
        ).validate()
    except ValueError as exc:
        fail(str(exc), Exit.USAGE)
    if secure is not None:
        files, token = local_secure.prepare(secure.resolve(), plan.names)
        plan = replace(plan, secure=files)
        if token is not None:
            typer.echo(f"admin token (kept in {files.admin_token}): {token}")
    supervisor = Supervisor(plan)
    stop_on_signals()
    try:
        supervisor.start()
        _announce(plan)
        while True:
            for message in supervisor.watch_once():
                typer.echo(message, err=True)
            time.sleep(1.0)
    except ZooKeeperMissing as exc:
        supervisor.stop()
        fail(f"{exc} (make cluster installs it)", Exit.ERROR)
    except ClusterError as exc:
        supervisor.stop()
        fail(f"the local cluster did not start: {exc}", Exit.ERROR)
    except KeyboardInterrupt:
        typer.echo("stopping the brokers, then ZooKeeper ...")
        supervisor.stop()
        typer.echo("stopped")


def _announce(plan: LocalCluster) -> None:
    first = plan.url(plan.names[0])
    typer.echo(f"ZooKeeper on 127.0.0.1:{plan.zk_port} (cluster {plan.zk_url})")
    for name in plan.names:
        kafka = ""
        if plan.kafka_first_port is not None:
            kafka = f", Kafka on 127.0.0.1:{plan.kafka_first_port + plan.names.index(name)}"
        typer.echo(f"broker {name} on {plan.url(name)}{kafka} (log: {plan.log(name)})")
    if plan.secure is not None:
        typer.echo(f"secured: export SPARKMQ_TOKEN=$(cat {plan.secure.admin_token})")
    typer.echo(f"try: sparkmq cluster status --endpoint {first}   (or export SPARKMQ_URL={first})")
    typer.echo("Ctrl-C stops the cluster")
