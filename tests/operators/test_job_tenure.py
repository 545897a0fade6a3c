"""One operator job per checkpoint, and a broker adopting the job its crashed predecessor left
(``streaming/operators/tenure.py``, :class:`broker.operators.OperatorSupervisor`), with real
processes holding real lock files (the end-to-end case with Spark is in
``test_delay_e2e.py::test_the_restarted_broker_adopts_the_job_and_delivers_the_overdue_once``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.operators import FINGERPRINT_ENV, OperatorSupervisor, launch_fingerprint, lock_holder
from streaming.operators.client import BrokerClient
from streaming.operators.config import parse_args
from streaming.operators.tenure import BrokerWatch, hold_lock
from tests.support.waiting import wait_until

#: A stand-in job: holds the lock file as the operator job does, prints READY, then sleeps
#: until SIGTERM (its own code path: tenure.hold_lock, the job's).
HOLDER = (
    "import signal, sys, time\n"
    "from pathlib import Path\n"
    "from streaming.operators.tenure import hold_lock\n"
    "if hold_lock(Path(sys.argv[1])) is None: sys.exit(3)\n"
    "print('READY', flush=True)\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "time.sleep(600)\n"
)


def holder_argv(lock: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", HOLDER, str(lock), *extra]


@pytest.fixture
def reaped() -> Iterator[list[int]]:
    """Pids a test leaves running (adopted, not children): SIGKILLed at the end."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def start_holder(lock: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        holder_argv(lock), stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


def test_one_holder_at_a_time_and_the_kernel_frees_the_lock_of_a_killed_one(tmp_path: Path) -> None:
    lock = tmp_path / "ckpt" / "job.lock"
    assert lock_holder(lock) is None, "no file: nobody holds it"
    first = start_holder(lock, {FINGERPRINT_ENV: "digest-1"})
    try:
        assert lock_holder(lock) == {"pid": first.pid, "fingerprint": "digest-1"}
        second = subprocess.run(holder_argv(lock), check=False, capture_output=True, text=True, timeout=60)
        assert second.returncode == 3 and "READY" not in second.stdout, "a second job on one checkpoint"
        assert json.loads(lock.read_text())["pid"] == first.pid, "the loser wrote nothing"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert lock_holder(lock) is None, "kill -9 released it"
    assert hold_lock(lock) is not None  # and this process may take it


def test_a_launch_fingerprint_is_its_argv_and_shaping_settings_never_a_secret() -> None:
    argv = ["python", "-m", "streaming.operators", "--endpoint", "http://127.0.0.1:8080"]
    env = {"SPARKMQ_TOKEN": "s3cret-token-value", "PATH": "/bin", "INVOCATION_ID": "a"}
    digest = launch_fingerprint(argv, env)
    assert len(digest) == 64 and "s3cret" not in digest
    assert launch_fingerprint(argv, {**env, "INVOCATION_ID": "b", "OLDPWD": "/x"}) == digest
    assert launch_fingerprint(argv, {**env, FINGERPRINT_ENV: "old"}) == digest
    assert launch_fingerprint([*argv[:-1], "http://127.0.0.1:8081"], env) != digest
    assert launch_fingerprint(argv, {**env, "SPARKMQ_TOKEN": "rotated"}) != digest
    assert launch_fingerprint(argv, {**env, "SPARKMQ_OPERATOR_CONF": "k=v"}) != digest


def _watch_until(supervisor: OperatorSupervisor, done: Callable[[], bool]) -> None:
    """Run ``supervisor.watch()`` until ``done()`` holds (60 s at most), then stop watching."""

    async def main() -> None:
        task = asyncio.create_task(supervisor.watch())
        try:
            for _ in range(600):
                if done():
                    return
                await asyncio.sleep(0.1)
            raise AssertionError("the supervisor never got there")
        finally:
            supervisor._stopping = True
            task.cancel()

    asyncio.run(main())


def test_a_broker_adopts_a_job_of_its_own_launch_and_stops_it_when_it_stops(
    tmp_path: Path, reaped: list[int]
) -> None:
    lock = tmp_path / "job.lock"
    argv = holder_argv(lock)
    first = OperatorSupervisor(argv, lock_path=lock, grace_s=60)
    first._spawn()  # the crashed broker's job: it has no PDEATHSIG with a grace
    assert first._proc is not None
    orphan = first._proc.pid
    reaped.append(orphan)
    wait_until(lambda: (lock_holder(lock) or {}).get("pid") == orphan, 30, "the job to hold its lock")
    second = OperatorSupervisor(argv, lock_path=lock, grace_s=60)
    _watch_until(second, lambda: second.adoptions == 1)
    assert second.pid == orphan and second.running and second.restarts == 0
    assert lock_holder(lock) == {"pid": orphan, "fingerprint": second.fingerprint}, "no second job"
    second.stop(10)
    assert lock_holder(lock) is None and first._proc.wait(10) == 0, "SIGTERM stopped the adopted job"


@pytest.mark.parametrize("change", ["argv", "no grace"])
def test_a_job_of_another_launch_is_stopped_and_a_new_one_started(
    tmp_path: Path, reaped: list[int], change: str
) -> None:
    lock = tmp_path / "job.lock"
    old = OperatorSupervisor(holder_argv(lock, "--port-8080"), lock_path=lock, grace_s=60)
    old._spawn()
    assert old._proc is not None
    reaped.append(old._proc.pid)
    wait_until(lambda: lock_holder(lock) is not None, 30, "the old job to hold its lock")
    argv = holder_argv(lock, "--port-8081") if change == "argv" else holder_argv(lock, "--port-8080")
    new = OperatorSupervisor(argv, lock_path=lock, grace_s=60 if change == "argv" else 0)
    try:
        _watch_until(new, lambda: new._proc is not None and (lock_holder(lock) or {}).get("pid") == new.pid)
        assert old._proc.wait(10) == 0, "the old job was stopped (SIGTERM)"
        assert new.adoptions == 0
    finally:
        new.stop(10)


def test_the_job_refuses_a_checkpoint_another_job_holds(tmp_path: Path) -> None:
    lock = tmp_path / "ckpt" / "job.lock"
    holder = start_holder(lock)
    try:
        argv = ["--endpoint", "http://127.0.0.1:9", "--checkpoint-dir", str(tmp_path / "ckpt")]
        argv += ["--lock-file", str(lock)]
        run = subprocess.run(
            [sys.executable, "-m", "streaming.operators", *argv],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 3, run.stderr[-2000:]
        assert "another operator job holds" in run.stderr
    finally:
        holder.kill()
        holder.wait()


def test_two_jobs_started_by_hand_on_one_local_checkpoint_the_second_exits(tmp_path: Path) -> None:
    """``sparkmq operators`` without ``--lock-file`` locks ``job.lock`` in a local checkpoint
    directory: the first job holds it (here while it waits for a broker that is not there)."""
    argv = [sys.executable, "-m", "streaming.operators", "--endpoint", "http://127.0.0.1:9"]
    argv += ["--checkpoint-dir", str(tmp_path / "ckpt")]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        lock = tmp_path / "ckpt" / "job.lock"
        wait_until(lambda: (lock_holder(lock) or {}).get("pid") == first.pid, 60, "the first job's lock")
        second = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)
        assert second.returncode == 3 and "another operator job holds" in second.stderr
        assert first.poll() is None, "the first job carries on"
    finally:
        first.kill()
        first.wait()
    remote = parse_args(["--endpoint", "http://127.0.0.1:9", "--checkpoint-dir", "hdfs://nn/ckpt"])
    assert remote.lock_file is None, "no local file to lock on a remote checkpoint"
    assert parse_args(["--endpoint", "http://127.0.0.1:9", "--lock-file", "none"]).lock_file is None


def test_the_jobs_flags_and_its_watch_of_an_unanswering_broker() -> None:
    config = parse_args(["--endpoint", "http://127.0.0.1:9", "--broker-grace-s", "0.2", "--lock-file", "x"])
    assert config.broker_grace_s == 0.2 and config.lock_file == Path("x")
    assert parse_args(["--endpoint", "http://127.0.0.1:9"]).broker_grace_s == 0, "never gives up by default"
    assert BrokerClient("http://127.0.0.1:9", timeout_s=2, learn_group=False).reach() is None
    watch = BrokerWatch(0.2)
    assert not watch.unanswered()
    wait_until(watch.unanswered, 5, "the grace to run out")
    watch.answered()
    assert not watch.unanswered(), "an answer starts the grace again"
    assert not BrokerWatch(0).unanswered()
