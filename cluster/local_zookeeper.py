"""A standalone ZooKeeper on this machine, for tests and ``make cluster`` (not for production).

It runs Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``, ZooKeeper 3.8) on
the Java that Spark already needs, with a throwaway ``zoo.cfg``: loopback only, no AdminServer
(it would bind 8080), the four-letter words the readiness probe uses, and a short tick so
session timeouts from 1 s to 60 s are accepted.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cluster.errors import ClusterError

#: Where Debian's package puts the server jar (its manifest carries the dependencies' classpath).
DEBIAN_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_CONF = Path("/etc/zookeeper/conf")
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperMissing(ClusterError):
    code = "zookeeper_missing"


def zoo_cfg(data_dir: Path, port: int, tick_ms: int = 500, enforce_auth: bool = False) -> str:
    """``enforce_auth``: sessions must authenticate (digest) before any operation
    (``enforce.auth.enabled``, ZooKeeper 3.7+); every sparkmq node has a digest ACL anyway."""
    auth = ["enforce.auth.enabled=true", "enforce.auth.schemes=digest"] if enforce_auth else []
    return "\n".join(
        [
            f"tickTime={tick_ms}",
            f"dataDir={data_dir}",
            f"clientPort={port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr,stat",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            *auth,
            "",
        ]
    )


def is_ready(port: int, timeout_s: float = 0.5) -> bool:
    """True when the server on ``port`` answers ``ruok`` with ``imok``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as conn:
            conn.sendall(b"ruok")
            return conn.recv(16) == b"imok"
    except OSError:
        return False


@dataclass
class LocalZooKeeper:
    """One ZooKeeper server process on 127.0.0.1:``port`` with its data under ``data_dir``."""

    data_dir: Path
    port: int
    #: Refuse unauthenticated sessions (``sparkmq cluster zookeeper --enforce-auth``).
    enforce_auth: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, chroot: str = "") -> str:
        return f"zk://127.0.0.1:{self.port}{chroot}"

    def start(self, timeout_s: float = 60.0) -> LocalZooKeeper:
        """Start (or restart, keeping the data) and wait until it answers ``ruok``."""
        java = shutil.which("java")
        if java is None or not DEBIAN_JAR.is_file():
            raise ZooKeeperMissing(
                "ZooKeeper needs Java and Debian's zookeeper package: apt-get install -y zookeeper"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(zoo_cfg(self.data_dir / "data", self.port, enforce_auth=self.enforce_auth))
        log = (self.data_dir / "zookeeper.log").open("ab")
        classpath = f"{DEBIAN_CONF}:{DEBIAN_JAR}" if DEBIAN_CONF.is_dir() else str(DEBIAN_JAR)
        self.process = subprocess.Popen(
            [
                java,
                "-Xmx256m",
                "-cp",
                classpath,
                f"-Dzookeeper.log.dir={self.data_dir}",
                MAIN_CLASS,
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while not is_ready(self.port):
            if self.process.poll() is not None:
                raise ClusterError(
                    f"ZooKeeper exited with {self.process.returncode}; see {self.data_dir}/zookeeper.log"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ClusterError(f"ZooKeeper did not answer on {self.address} within {timeout_s:.0f} s")
            time.sleep(0.1)
        return self

    def stop(self) -> None:
        """Stop the server (SIGKILL: as abrupt as a crash; its data stays)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None
