"""A Spark standalone cluster on 127.0.0.1 from the ``pyspark`` package's own jars.

The 4.3.0 wheel has no ``sbin/start-master.sh``; ``bin/spark-class`` runs the deploy classes
(``../shared/reference/cluster.md`` §6.1)::

    SPARK_HOME=<site-packages>/pyspark SPARK_LOCAL_IP=127.0.0.1 \\
        bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port P --webui-port U
    ... bin/spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 1g spark://127.0.0.1:P

``spark-class`` ends in ``exec java``, so each process started here *is* its JVM: ``kill -9`` of
a worker's pid kills that worker (its executor exits when it loses the worker). Starting a master
and two workers takes ~25 s on an idle machine; the tests share one cluster per session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from tests.support.network import free_port
from tests.support.waiting import wait_until

SPARK_HOME = Path(pyspark.__file__).resolve().parent
#: Memory an executor asks for (a worker offers 1 GiB).
EXECUTOR_MEMORY = "512m"


def cluster_env() -> dict[str, str]:
    """The environment of the cluster's processes and of drivers that join it."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }


@dataclass
class SparkCluster:
    master_url: str
    web_url: str
    directory: Path
    master: subprocess.Popen[bytes]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` document (empty while it does not answer)."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
                doc: dict[str, Any] = json.loads(response.read())
                return doc
        except OSError:
            return {}

    def alive_workers(self) -> int:
        return sum(1 for w in self.state().get("workers", []) if w["state"] == "ALIVE")

    def kill_worker(self, index: int) -> int:
        """SIGKILL worker ``index`` (its JVM); returns the pid."""
        process = self.workers[index]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
        return process.pid

    def replace_worker(self, index: int) -> None:
        """Start a new worker in place of worker ``index`` (after :meth:`kill_worker`)."""
        work_dir = self.directory / f"worker-{index}-{len(self.workers)}"
        self.workers[index] = _start_worker(
            self.master_url, work_dir, self.directory / f"{work_dir.name}.log"
        )

    def stop(self) -> None:
        for process in [*self.workers, self.master]:
            if process.poll() is None:
                process.kill()
                process.wait(30)


def _spark_class(
    main: str, args: list[str], log: Path, extra_env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**cluster_env(), **(extra_env or {})},
        )


def _start_worker(master_url: str, work_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    work_dir.mkdir(parents=True, exist_ok=True)
    return _spark_class(
        "org.apache.spark.deploy.worker.Worker",
        ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
         "--work-dir", str(work_dir), master_url],
        log,
    )  # fmt: skip


def start_cluster(directory: Path, workers: int = 2, timeout_s: float = 180.0) -> SparkCluster:
    """A master and ``workers`` workers of 1 core and 1 GiB each, all on 127.0.0.1."""
    directory.mkdir(parents=True, exist_ok=True)
    port, web = free_port(), free_port()
    master = _spark_class(
        "org.apache.spark.deploy.master.Master",
        ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web)],
        directory / "master.log",
    )
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", directory, master)
    try:
        wait_until(
            lambda: cluster.state().get("status") == "ALIVE", timeout_s, "the Spark master", poll_s=0.5
        )
        for i in range(workers):
            cluster.workers.append(
                _start_worker(cluster.master_url, directory / f"worker-{i}", directory / f"worker-{i}.log")
            )
        wait_until(
            lambda: cluster.alive_workers() == workers, timeout_s, f"{workers} alive workers", poll_s=0.5
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster
