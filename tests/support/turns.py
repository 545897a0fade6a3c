"""Tests that take turns across xdist workers.

A test that runs several operator jobs at once (two brokers with their own Spark drivers)
saturates this machine's 2 cores by itself: the jobs' idle stateful micro-batches take 3-4 s
each instead of 0.3-0.65 s, and a new Python worker then misses PySpark's fixed 10 s to
connect back, start after start. Two such tests side by side (one per xdist worker) did that
for minutes in a CI run. They take the fixture below, so only one runs at a time; the other
worker waits, then runs it. With ``--dist loadfile`` their files are one unit of work
(``TAKE_TURNS`` in ``tests/conftest.py``): one worker runs both, and the lock never waits.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator

import pytest

#: A test that waits for its turn may wait out the other one's whole run.
TURN_WAIT_S = 900


@pytest.fixture
def several_spark_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Hold the lock that tests running several Spark jobs take turns on (one file shared by
    every xdist worker of the session: their base temp directories' parent)."""
    lock = tmp_path_factory.getbasetemp().parent / "several-spark-jobs.lock"
    with open(lock, "w") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
