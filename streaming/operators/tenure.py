"""One operator job per checkpoint, and how long a job outlives its broker.

* **The lock** (``--lock-file``; by default ``job.lock`` in a local ``--checkpoint-dir``, none
  for a remote one such as ``hdfs://``): a job holds an exclusive ``flock`` on the file for its whole
  life and writes ``{"pid": ..., "fingerprint": ...}`` into it (``fingerprint``: what its
  supervisor put in :data:`FINGERPRINT_ENV`, a digest of its launch). A second job on the same
  checkpoint finds it held and exits with :data:`LOCK_HELD_EXIT`: two drivers never run one
  query's checkpoint. The kernel drops the lock when the driver dies, however it dies.
  ``sparkmq serve`` (:class:`broker.operators.OperatorSupervisor`) reads the same file: a broker
  that finds a job of its own launch still holding it after a ``kill -9`` adopts that job
  instead of starting another.
* **The grace** (``--broker-grace-s``): while no broker answers, the job keeps its queries (a
  batch's POST waits for the broker, :class:`streaming.operators.client.BrokerClient`), so a
  restarted broker gets its decisions within a trigger, without a new job's start. After the
  grace with no answer the job exits with :data:`BROKER_GONE_EXIT`, and at once: the checkpoint
  is then as after a driver ``kill -9``, which the job is built to resume from.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("sparkmq.operators")

#: The variable a supervisor sets to the digest of the job's launch (argv and settings).
FINGERPRINT_ENV = "SPARKMQ_JOB_FINGERPRINT"
#: Exit status: another job holds the lock of this checkpoint.
LOCK_HELD_EXIT = 3
#: Exit status: no broker answered for the grace.
BROKER_GONE_EXIT = 4


def hold_lock(path: Path) -> int | None:
    """Lock ``path`` exclusively for the rest of this process's life and write this job's
    holder record into it; ``None`` (nothing written) when another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    record = json.dumps({"pid": os.getpid(), "fingerprint": os.environ.get(FINGERPRINT_ENV)})
    os.ftruncate(fd, 0)
    os.pwrite(fd, record.encode(), 0)
    return fd  # kept open (and locked) until the process ends


class BrokerWatch:
    """How long the broker has not answered, against the grace (``grace_s`` 0: wait for ever)."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._away_since: float | None = None

    def answered(self) -> None:
        if self._away_since is not None:
            log.info("the broker answers again after %.1f s", time.monotonic() - self._away_since)
        self._away_since = None

    def unanswered(self) -> bool:
        """Record a call nobody answered; ``True`` once the grace has run out."""
        now = time.monotonic()
        if self._away_since is None:
            self._away_since = now
            log.warning("the broker does not answer: the queries wait for it (grace %.0f s)", self.grace_s)
        return self.grace_s > 0 and now - self._away_since > self.grace_s
