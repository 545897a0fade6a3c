"""The broker's view of its stateful operators: relocation publishing, status and the child job.

* :class:`OperatorBoard` keeps what ``GET /operators`` shows: each query's last reported
  progress, the pending delayed messages per (bucket, shard) key as the resolver last reported
  them, the relocations published and their lateness (delivered store time - due time).
* :class:`OperatorSupervisor` runs the operator job (``python -m streaming.operators``) as a
  child process of ``sparkmq serve``: started after the broker is up (the broker is healthy
  before Spark is), restarted with back-off when it dies, stopped with SIGTERM (then SIGKILL)
  when the broker stops. What a ``kill -9`` of the broker does to it depends on the grace
  (``--operator-job-grace``):

  - **0**: the child gets ``PR_SET_PDEATHSIG`` and dies with the broker; the JVM it started
    exits when its Python driver goes (PySpark's gateway watches its stdin), so no driver is
    orphaned; the next broker's job resumes from the checkpoint, a new job's start later
    (a SparkSession, the queries' start, their first batches: about 15 s on two cores).
  - **N seconds**: the job outlives the broker for up to N s, its queries waiting for it. The
    next broker finds the job still holding its lock file (:mod:`streaming.operators.tenure`)
    and **adopts** it when it was launched the same way (the digest of its argv and settings,
    :func:`launch_fingerprint`); a job launched otherwise (another port, other queries) is
    stopped and a new one started. The adopted job posts its waiting batch as soon as the
    broker answers: the first overdue delivery comes a trigger after the broker's start.

  Its command line and environment (endpoint, CA, credential) are :mod:`broker.operator_job`'s.
"""

from __future__ import annotations

import asyncio
import ctypes
import fcntl
import hashlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from broker.config import WHEEL_LOOKAHEAD_MS
from broker.transactions import TransactionBoard
from broker.wheel import DelayWheel
from store import DELAY_OPERATOR, MessageStore
from store.publish import RelocationLog, RelocationOutcome, WheelLog

log = logging.getLogger("sparkmq.operators")

ROW_RELOCATION, ROW_SUMMARY = 0, 1
#: Lateness histogram buckets, seconds (delivered store time - due time).
LATENESS_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 1.5, 2.5, 5.0, 10.0, 30.0, 60.0)
_PR_SET_PDEATHSIG = 1


@dataclass
class LatenessHistogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENESS_BUCKETS_S) + 1))
    total: int = 0
    sum_s: float = 0.0

    def observe_many(self, lateness_ms: npt.ArrayLike) -> None:
        seconds = np.maximum(np.asarray(lateness_ms, dtype=np.int64), 0) / 1000
        if not len(seconds):
            return
        buckets = np.searchsorted(np.asarray(LATENESS_BUCKETS_S), seconds, side="left")
        for i, count in enumerate(np.bincount(buckets, minlength=len(self.counts)).tolist()):
            self.counts[i] += count
        self.total += len(seconds)
        self.sum_s += float(seconds.sum())


KeySummary = tuple[int, int | None, int | None]


@dataclass
class OperatorState:
    status: dict[str, Any] = field(default_factory=dict)
    #: (bucket_ms, shard, parked queue) -> (pending count, next action ms, min queue offset),
    #: as the resolver last reported each key (parked queue: level - 1, or -1 for timers).
    pending_by_key: dict[tuple[int, int, int], KeySummary] = field(default_factory=dict)
    relocated_total: int = 0
    lateness: LatenessHistogram = field(default_factory=LatenessHistogram)
    last_published_batch: int = -1

    def pending(self) -> int:
        return sum(count for count, _, _ in self.pending_by_key.values())

    def next_due_ms(self) -> int | None:
        times = [t for count, t, _ in self.pending_by_key.values() if count and t is not None]
        return min(times) if times else None

    def delay_offsets(self, levels: int) -> dict[int, int]:
        """RocketMQ's delayOffset.json meaning: per level, the smallest queue offset still
        pending, else the query's committed end offset of that level queue."""
        ends = self.status.get("end_offsets") or {}
        out: dict[int, int] = {}
        for level in range(1, levels + 1):
            pending = [
                o
                for (_, _, q), (n, _, o) in self.pending_by_key.items()
                if q == level - 1 and n and o is not None
            ]
            if pending:
                out[level] = min(pending)
            elif f"SCHEDULE_TOPIC_XXXX/{level - 1}" in ends:
                out[level] = int(ends[f"SCHEDULE_TOPIC_XXXX/{level - 1}"])
        return out


class OperatorBoard:
    """Relocation publishing plus the status of every operator of one broker."""

    def __init__(
        self,
        store: MessageStore,
        settings: dict[str, Any],
        *,
        chunk_rows: int = 65_536,
        fault: str | None = None,
        wheel_lookahead_ms: int = WHEEL_LOOKAHEAD_MS,
    ) -> None:
        """``wheel_lookahead_ms`` 0: no wheel (every decision is published when it arrives)."""
        self.store = store
        self.settings = dict(settings, wheel_lookahead_ms=wheel_lookahead_ms)
        hook = _crash_hook(fault)
        self.relocations = RelocationLog(store, chunk_rows=chunk_rows, on_event=hook)
        #: The broker's delay wheel (started by the lifecycle: ``broker.wheel.wheel_service``).
        self.wheel: DelayWheel | None = None
        if wheel_lookahead_ms > 0:
            wheel_log = WheelLog(store, chunk_rows)
            self.wheel = DelayWheel(wheel_log, store.now_ms, observe=self._observe_wheel, on_event=hook)
            self.relocations.wheel = wheel_log
            wheel_log.exclusive = self.relocations.exclusive
            self.relocations.on_scheduled = self.wheel.schedule
        self._lock = threading.Lock()
        self._states: dict[str, OperatorState] = {}
        self.supervisor: OperatorSupervisor | None = None
        #: Transactions: the service, check-backs and the resolver's decisions (set by the app).
        self.transactions: TransactionBoard | None = None
        #: Consumer groups' retry settings (max reconsume times, retry queues); set by the app.
        self.group_configs: Any = None

    def state(self, operator: str) -> OperatorState:
        with self._lock:
            return self._states.setdefault(operator, OperatorState())

    def commit_batch(self, operator: str, batch_id: int, table: pa.Table) -> RelocationOutcome:
        """Decide and publish one batch of resolver output (blocking; run in a thread)."""
        kind = table.column("row_type") if "row_type" in table.column_names else None
        relocations = table.filter(pc.equal(kind, ROW_RELOCATION)) if kind is not None else table
        outcome = self.relocations.commit(operator, batch_id, relocations)
        state = self.state(operator)
        if kind is not None:
            summaries = table.filter(pc.equal(kind, ROW_SUMMARY)).to_pydict()
            for bucket, shard, queue, pending, next_ms, min_offset in zip(
                summaries["bucket_ms"], summaries["shard"], summaries["src_queue"], summaries["pending"],
                summaries["next_action_ms"], summaries["min_queue_offset"], strict=True,
            ):  # fmt: skip
                key = (int(bucket), int(shard), int(queue))
                if pending:
                    state.pending_by_key[key] = (int(pending), next_ms, min_offset)
                else:
                    state.pending_by_key.pop(key, None)
        delivered = outcome.due_ms[outcome.due_ms > 0]  # rolls and send-backs were not due
        if len(delivered):
            now = self.store.now_ms()  # just after the append: the delivered store time
            state.lateness.observe_many(now - delivered)
        state.relocated_total += outcome.appended
        state.last_published_batch = max(state.last_published_batch, batch_id)
        return outcome

    def _observe_wheel(self, operator: str, appended: int, due_ms: npt.NDArray[np.int64]) -> None:
        """A decision the wheel published: its lateness (wheel thread)."""
        delivered = due_ms[due_ms > 0]
        state = self.state(operator)
        if len(delivered):
            state.lateness.observe_many(self.store.now_ms() - delivered)
        state.relocated_total += appended

    def report(self, operator: str, status: dict[str, Any]) -> None:
        state = self.state(operator)
        state.status = dict(status, reported_at_ms=self.store.now_ms())
        if operator == DELAY_OPERATOR and "end_offsets" in status:
            levels = len(self.settings.get("delay_levels_ms", ()))
            self.store.set_delay_offsets(state.delay_offsets(levels))

    def describe(self) -> list[dict[str, Any]]:
        names = set(self._states) | set(self.relocations.operators())
        out = []
        for name in sorted(names):
            state = self.state(name)
            out.append(
                {
                    "operator": name,
                    **state.status,
                    "last_published_batch": max(
                        state.last_published_batch, self.relocations.last_published(name)
                    ),
                    "relocated_total": state.relocated_total,
                    "pending": state.pending(),
                    "next_due_ms": state.next_due_ms(),
                    **self._wheel_status(name),
                }
            )
        return out

    def _wheel_status(self, operator: str) -> dict[str, Any]:
        if self.wheel is None or operator != DELAY_OPERATOR:
            return {}
        wheel = self.wheel
        return {
            "wheel_pending": wheel.pending(),
            "wheel_next_due_ms": wheel.next_due_ms(),
            "wheel_published_total": wheel.published_total,
            "wheel_loaded_total": wheel.loaded_total,
            "wheel_replayed_total": wheel.replayed_total,
        }

    def metrics_text(self) -> str:
        """Prometheus text of the operators (appended to ``/metrics``)."""
        rows = self.describe()
        lines: list[str] = []
        if self.transactions is not None:
            lines.append(self.transactions.metrics_text().rstrip("\n"))

        def family(name: str, kind: str, help_text: str, values: list[tuple[str, Any]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f'{name}{{operator="{op}"}} {value}' for op, value in values if value is not None)

        family(
            "sparkmq_operator_up",
            "gauge",
            "1 while the operator's query is active.",
            [(r["operator"], int(r.get("state") == "active")) for r in rows],
        )
        family(
            "sparkmq_operator_last_batch_id",
            "gauge",
            "Last micro-batch id of the operator's query.",
            [(r["operator"], r.get("last_batch_id")) for r in rows],
        )
        family(
            "sparkmq_operator_input_lag_messages",
            "gauge",
            "Parked messages not yet read by the query.",
            [(r["operator"], r.get("input_lag")) for r in rows],
        )
        family(
            "sparkmq_operator_pending_messages",
            "gauge",
            "Messages held in state, waiting to come due.",
            [(r["operator"], r["pending"]) for r in rows],
        )
        family(
            "sparkmq_operator_next_due_timestamp_ms",
            "gauge",
            "Earliest due time held in state (epoch ms).",
            [(r["operator"], r["next_due_ms"]) for r in rows],
        )
        family(
            "sparkmq_operator_relocated_total",
            "counter",
            "Messages delivered or rolled since start.",
            [(r["operator"], r["relocated_total"]) for r in rows],
        )
        name = "sparkmq_operator_lateness_seconds"
        lines.append(f"# HELP {name} Delivery time minus due time of delivered messages.")
        lines.append(f"# TYPE {name} histogram")
        for r in rows:
            hist = self.state(r["operator"]).lateness
            cumulative = 0
            for bound, count in zip((*LATENESS_BUCKETS_S, "+Inf"), hist.counts, strict=True):
                cumulative += count
                lines.append(f'{name}_bucket{{operator="{r["operator"]}",le="{bound}"}} {cumulative}')
            lines.append(f'{name}_sum{{operator="{r["operator"]}"}} {hist.sum_s:.3f}')
            lines.append(f'{name}_count{{operator="{r["operator"]}"}} {hist.total}')
        job = self.job()
        if job["mode"] == "child":
            lines.append("# HELP sparkmq_operator_job_restarts_total Restarts of the local operator job.")
            lines.append("# TYPE sparkmq_operator_job_restarts_total counter")
            lines.append(f"sparkmq_operator_job_restarts_total {job['restarts']}")
        return "\n".join(lines) + "\n"

    def job(self) -> dict[str, Any]:
        sup = self.supervisor
        if sup is None:
            return {"mode": "external"}
        return {
            "mode": "child",
            "running": sup.running,
            "pid": sup.pid,
            "restarts": sup.restarts,
            "adoptions": sup.adoptions,
            "grace_s": sup.grace_s,
        }


def _crash_hook(fault: str | None) -> Any:
    """Test only: SIGKILL this broker once, after the relocation step named in ``fault``
    (``<step>:<marker file>``); ``sleep-chunk:<ms>`` slows every chunk down instead (so a test
    can kill the operator driver while a publish is under way)."""
    if not fault:
        return None
    point, marker = fault.split(":", 1)

    def hit(event: str) -> None:
        if point == "sleep-chunk" and event.startswith("chunk-"):
            time.sleep(int(marker) / 1000)
        elif event == point and not os.path.exists(marker):
            Path(marker).write_text(event)
            log.warning("test fault: killing the broker after relocation step %s", event)
            os.kill(os.getpid(), signal.SIGKILL)

    return hit


def _die_with_parent() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the parent already died between fork and prctl
        os._exit(1)


#: The job's launch digest, in its environment and its lock file (:mod:`streaming.operators.tenure`).
FINGERPRINT_ENV = "SPARKMQ_JOB_FINGERPRINT"
#: The variables that shape a job (the rest of the broker's environment does not, and varies
#: between two starts of one broker: systemd's INVOCATION_ID, a shell's OLDPWD).
_SHAPING_PREFIXES = ("SPARKMQ_", "SPARK_", "PYSPARK_", "JAVA_", "PYTHON")


def launch_fingerprint(argv: Sequence[str], env: Mapping[str, str] | None) -> str:
    """A digest of what makes two launches the same job: argv and the shaping variables (the
    credential among them: a digest, never the secret itself, reaches the lock file)."""
    shaping = sorted(
        (k, v)
        for k, v in (env or os.environ).items()
        if k.startswith(_SHAPING_PREFIXES) and k != FINGERPRINT_ENV
    )
    return hashlib.sha256(json.dumps([list(argv), shaping]).encode()).hexdigest()


def lock_holder(path: Path) -> dict[str, Any] | None:
    """The record of the job holding ``path`` (``pid`` ``None`` while it is still writing it), or
    ``None`` when no process holds the lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                record = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                record = {}
            return {"pid": record.get("pid"), "fingerprint": record.get("fingerprint")}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class OperatorSupervisor:
    """Keeps one operator job alive for the broker's lifetime (see the module docstring)."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path | None = None,
        max_backoff_s: float = 30.0,
        env: Mapping[str, str] | None = None,
        *,
        lock_path: Path | None = None,
        grace_s: float = 0.0,
    ) -> None:
        """``env``: the job's whole environment (``None``: this process's); it may hold the
        job's credential, so it is never logged (argv is: keep secrets out of it).
        ``lock_path``: the job's ``--lock-file`` (a job holding it is adopted or stopped);
        ``grace_s`` > 0: the job outlives a ``kill -9`` of the broker (no PDEATHSIG)."""
        self.argv = list(argv)
        self._env = None if env is None else dict(env)
        self.fingerprint = launch_fingerprint(self.argv, self._env)
        self.log_path = log_path
        self.max_backoff_s = max_backoff_s
        self.lock_path = lock_path
        self.grace_s = grace_s
        self.restarts = 0
        self.adoptions = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._adopted: int | None = None  # the pid of a job a previous broker started
        self._stopping = False
        #: Whether the job should run now: always for a lone broker; in a replica group only on
        #: the master (a slave's parked records are its master's, resolved by its master's job).
        self.should_run: Callable[[], bool] = lambda: True

    def _holder(self) -> dict[str, Any] | None:
        return lock_holder(self.lock_path) if self.lock_path is not None else None

    @property
    def running(self) -> bool:
        if self._adopted is not None:
            return self._holder() is not None
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        if self._adopted is not None:
            return self._adopted
        return self._proc.pid if self._proc is not None else None

    def _spawn(self) -> None:
        out = open(self.log_path, "ab") if self.log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        env = {**(os.environ if self._env is None else self._env), FINGERPRINT_ENV: self.fingerprint}
        try:
            # Spawned from the event loop's (main) thread: PDEATHSIG follows the spawning thread.
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if self.grace_s <= 0 else None,  # noqa: PLW1509 (prctl only)
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        log.info("operator job started (pid %d): %s", self._proc.pid, " ".join(self.argv))

    async def _settle_holder(self, holder: dict[str, Any]) -> bool:
        """A job holds the lock: adopt it (``True``) when it is of this launch, else stop it."""
        pid = holder["pid"]
        if pid is None:  # it is writing its record
            await asyncio.sleep(0.2)
            return False
        if holder["fingerprint"] == self.fingerprint and self.grace_s > 0:
            self._adopted = pid
            self.adoptions += 1
            log.info("adopted the operator job a previous broker left running (pid %d)", pid)
            return True
        log.warning("an operator job of another launch holds %s (pid %d): stopping it", self.lock_path, pid)
        await asyncio.to_thread(self._stop_holder, pid, 30.0)
        return False

    def _stop_holder(self, pid: int, timeout_s: float) -> None:
        """SIGTERM the lock's holder (not a child: its exit shows as the lock's release), then
        SIGKILL after ``timeout_s``."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
            with suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self._holder() is None:
                    return
                time.sleep(0.1)
            if sig == signal.SIGTERM:
                log.warning("operator job %d did not stop in %.0f s: killing it", pid, timeout_s)

    async def watch(self) -> None:
        backoff = 1.0
        while not self._stopping:
            if not self.should_run():
                holder = self._holder()  # a job a previous broker left, this one not the master
                if holder is not None and holder["pid"] is not None:
                    await asyncio.to_thread(self._stop_holder, holder["pid"], 30.0)
                await asyncio.sleep(0.5)
                continue
            started = time.monotonic()
            holder = self._holder()
            if holder is not None and not await self._settle_holder(holder):
                continue
            if holder is None:
                self._adopted = None
                self._spawn()
            while not self._stopping and self.running and self.should_run():
                await asyncio.sleep(0.5)
            if self._stopping:
                return
            if self.running:  # no longer the master: stop the job, start it again when we lead
                log.warning("this broker no longer leads its group: stopping its operator job")
                await asyncio.to_thread(self.terminate)
                continue
            code = self._proc.returncode if self._proc is not None and self._adopted is None else None
            self._adopted = None
            backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, self.max_backoff_s)
            log.error("operator job exited with status %s; restarting in %.0f s", code, backoff)
            self.restarts += 1
            await asyncio.sleep(backoff)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping = True
        self.terminate(timeout_s)

    def terminate(self, timeout_s: float = 30.0) -> None:
        """Stop the running job (SIGTERM, SIGKILL after ``timeout_s``); the watch may start it again."""
        if self._adopted is not None:
            self._stop_holder(self._adopted, timeout_s)
            return
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            log.warning("operator job did not stop in %.0f s: killing it", timeout_s)
            proc.kill()
            proc.wait()


@asynccontextmanager
async def supervised(board: OperatorBoard, supervisor: OperatorSupervisor) -> AsyncIterator[None]:
    """Run ``supervisor`` for the lifetime of the context (a broker companion)."""
    board.supervisor = supervisor
    task = asyncio.create_task(supervisor.watch())
    try:
        yield
    finally:
        supervisor._stopping = True
        await asyncio.to_thread(supervisor.stop)
        task.cancel()
