"""Spark's idle Python daemons, stopped while the queries run.

Spark starts one daemon (``python -m pyspark.daemon <worker module>``, ~46 MB) per kind of
Python worker and keeps it for the session's life. The operator job uses three kinds only when a
query starts: looking up, creating and planning the data source. Spark closes their idle workers
after a minute (``PythonWorkerFactory``'s idle timeout), but keeps their daemons: ~140 MB that
serve nothing until the next query start.

The job's loop calls :meth:`IdleDaemons.look`: a daemon of the job's driver JVM that has had no
worker process for ``idle_s`` is stopped with ``SIGTERM``, the daemon's own shutdown. When Spark
next needs a worker of that kind, its connection is refused and it starts a new daemon
(``PythonWorkerFactory.createThroughDaemon``: "Assuming that daemon unexpectedly quit,
attempting to restart"); that costs a Python start at a query's start. The task workers' daemon
keeps its workers while the queries run, so it stays.

A daemon without workers means Spark's pool of that kind is empty, with one exception: a pooled
worker that died on its own. Spark then tells the stopped daemon to kill it, which fails once;
the query fails, and the job starts it again (:func:`streaming.operators.runtime.run`).

Where ``/proc`` does not list processes (not Linux), nothing is stopped.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("sparkmq.operators")

#: How long a daemon may be without a worker before it is stopped, seconds. Spark empties a
#: pool only after a minute without use, so a daemon without workers has been idle that long.
IDLE_S = 10.0
#: How often :meth:`IdleDaemons.look` scans ``/proc``.
LOOK_EVERY_S = 5.0
#: How Spark starts a daemon: ``python -m pyspark.daemon <worker module>``.
DAEMON_ARGV = (b"-m", b"pyspark.daemon")


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    parent: int
    argv: tuple[bytes, ...]


def processes(proc: Path = Path("/proc")) -> list[Process]:
    """Every process ``proc`` lists (none where it lists none)."""
    found = []
    try:
        entries = [entry for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return []
    for entry in entries:
        try:
            stat = (proc / entry.name / "stat").read_bytes()
            argv = (proc / entry.name / "cmdline").read_bytes()
            parent = int(stat.rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        found.append(Process(int(entry.name), parent, tuple(argv.split(b"\0"))))
    return found


def driver_jvms(listed: list[Process]) -> set[int]:
    """Where the driver JVM can be: PySpark's own driver starts it as a child, and
    ``spark-submit`` starts the driver's Python as its child."""
    me = os.getpid()
    return {os.getppid(), *(p.pid for p in listed if p.parent == me)}


def idle_daemons(parents: set[int], listed: list[Process]) -> set[int]:
    """The daemons (children of ``parents`` started as :data:`DAEMON_ARGV`) with no child."""
    daemons = {p.pid for p in listed if p.parent in parents and p.argv[1:3] == DAEMON_ARGV}
    busy = {p.parent for p in listed if p.parent in daemons}
    return daemons - busy


@dataclass
class IdleDaemons:
    """Stops the driver's daemons that stayed without a worker for ``idle_s``."""

    idle_s: float = IDLE_S
    every_s: float = LOOK_EVERY_S
    #: the processes whose daemons these are, given the process list
    parents: Callable[[list[Process]], set[int]] = driver_jvms
    clock: Callable[[], float] = time.monotonic
    #: daemon pid -> since when it has been seen idle
    idle_since: dict[int, float] = field(default_factory=dict)
    stopped: int = 0
    _last: float = float("-inf")

    def look(self) -> None:
        now = self.clock()
        if now - self._last < self.every_s:
            return
        self._last = now
        listed = processes()
        idle = idle_daemons(self.parents(listed), listed)
        self.idle_since = {pid: self.idle_since.get(pid, now) for pid in idle}
        for pid, since in list(self.idle_since.items()):
            if now - since >= self.idle_s and self._stop(pid):
                del self.idle_since[pid]

    def _stop(self, pid: int) -> bool:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        self.stopped += 1
        log.info("stopped Spark's Python daemon %d: no worker for %.0f s", pid, self.idle_s)
        return True
