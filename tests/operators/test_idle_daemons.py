"""Spark's idle Python daemons stopped (``streaming/operators/daemons.py``), and Spark starting a
new one when it needs it again. Real processes: pyspark's daemon as Spark launches it, and a
real local Spark."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming.operators.daemons import IdleDaemons, Process, idle_daemons, processes
from tests.support.waiting import wait_until


@pytest.fixture
def daemon() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """pyspark's daemon as Spark starts it (``python -m pyspark.daemon <worker module>``), a
    child of this process, and its port."""
    env = {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s3cret"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyspark.daemon", "pyspark.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    (port,) = struct.unpack(">i", proc.stdout.read(4))
    yield proc, port
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_a_daemon_is_idle_without_a_worker_and_busy_with_one() -> None:
    listed = [
        Process(10, 1, (b"java", b"-cp", b"x")),
        Process(11, 10, (b"python", b"-m", b"pyspark.daemon", b"pyspark.worker")),
        Process(12, 11, (b"python", b"-m", b"pyspark.daemon", b"pyspark.worker")),  # its worker
        Process(13, 10, (b"python", b"-m", b"pyspark.daemon", b"pyspark.sql.worker.create_data_source")),
        Process(14, 10, (b"python", b"-m", b"pyspark.sql.streaming.python_streaming_source_runner")),
        Process(15, 99, (b"python", b"-m", b"pyspark.daemon", b"pyspark.worker")),  # another JVM's
    ]
    assert idle_daemons({10}, listed) == {13}
    assert idle_daemons({99}, listed) == {15}
    assert idle_daemons(set(), listed) == set()


def test_processes_lists_this_one_with_its_parent() -> None:
    me = [p for p in processes() if p.pid == os.getpid()]
    assert me and me[0].parent == os.getppid()


def test_the_daemon_stays_while_it_has_a_worker_and_is_stopped_when_idle(
    daemon: tuple[subprocess.Popen[bytes], int],
) -> None:
    proc, port = daemon
    clock = [0.0]
    idle = IdleDaemons(idle_s=10, every_s=0, parents=lambda _listed: {os.getpid()}, clock=lambda: clock[0])
    # A connection makes the daemon fork a worker, which then waits for Spark's secret.
    conn = socket.create_connection(("127.0.0.1", port))
    (worker,) = struct.unpack(">i", conn.recv(4))
    wait_until(lambda: any(p.pid == worker for p in processes()), 10, "the worker")
    for clock[0] in (0.0, 11.0, 22.0):
        idle.look()
    assert proc.poll() is None and idle.stopped == 0 and not idle.idle_since
    conn.close()  # the worker reads EOF instead of the secret and exits
    wait_until(lambda: not any(p.pid == worker for p in processes()), 10, "the worker's exit")
    clock[0] = 30.0
    idle.look()  # idle from now on
    assert proc.poll() is None and idle.idle_since == {proc.pid: 30.0}
    clock[0] = 39.0
    idle.look()
    assert proc.poll() is None
    clock[0] = 40.0
    idle.look()
    assert idle.stopped == 1
    proc.wait(10)  # SIGTERM: the daemon's own shutdown
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


#: A local Spark whose idle daemons are stopped after 1 s: a Python task; Spark closes the idle
#: worker after a minute (its own timeout), then the daemon is stopped; another Python task must
#: start a new daemon and succeed.
SPARK_SCRIPT = textwrap.dedent(
    """
    import time
    from pyspark.sql import SparkSession
    from streaming.operators.daemons import DAEMON_ARGV, IdleDaemons, driver_jvms, processes

    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()

    def daemons():
        listed = processes()
        jvms = driver_jvms(listed)
        return [p.pid for p in listed if p.parent in jvms and p.argv[1:3] == DAEMON_ARGV]

    assert spark.sparkContext.parallelize(range(4), 1).map(lambda x: x * 2).sum() == 12
    first = daemons()
    assert len(first) == 1, first
    idle = IdleDaemons(idle_s=1, every_s=0.5)
    deadline = time.monotonic() + 150
    while idle.stopped == 0 and time.monotonic() < deadline:
        idle.look()
        time.sleep(0.5)
    assert idle.stopped == 1, "the daemon was not stopped"
    while daemons() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not daemons()
    assert spark.sparkContext.parallelize(range(4), 1).map(lambda x: x + 1).sum() == 10
    second = daemons()
    assert len(second) == 1 and second != first, (first, second)
    print("RESTARTED", flush=True)
    spark.stop()
    """
)


@pytest.mark.slow
@pytest.mark.spark
def test_spark_starts_a_new_daemon_after_an_idle_one_was_stopped(tmp_path: Path) -> None:
    script = tmp_path / "restart.py"
    script.write_text(SPARK_SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESTARTED" in done.stdout, (done.stdout, time.monotonic() - started)
