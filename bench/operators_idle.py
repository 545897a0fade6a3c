"""What an idle operator job costs: cores used by its process tree while nothing is produced.

Each resolver query is ``transformWithState`` in processing time. The delay query runs a
micro-batch at every trigger, data or not; idle, the transaction query runs one every half
check interval (its source's clock), the retry query none. This starts a real ``sparkmq
serve --operators off`` and, beside it, the operator job (``python -m streaming.operators``,
as under ``spark-submit``) once per trigger setting, waits for the first batches, then samples
the job tree's CPU time (``/proc``: the driver JVM, its Python workers) over a window. The
baseline is the broker's own
process over the same windows (idle: it serves the job's polls and reports).

    python -m bench.operators_idle                    # the default trigger, then 500 ms
    python -m bench.operators_idle --triggers 1000,2000 --window 60
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streaming.operators.runtime import EVERY_TRIGGER
from tests.operators.broker_process import Broker, children_of, start_broker

QUERIES = ("delay", "transactions", "retry")


def _tree(root: int) -> set[int]:
    """``root`` and every descendant process."""
    found, todo = {root}, [root]
    while todo:
        for child in children_of(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cpu_s(pids: set[int]) -> float:
    """User plus system CPU seconds of ``pids`` (exited children included)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


def _batches(broker: Broker) -> dict[str, int]:
    """Each reporting query's last batch id (-1: active, no batch yet)."""
    operators = broker.operators().get("operators", [])
    return {
        op["operator"]: -1 if op.get("last_batch_id") is None else op["last_batch_id"]
        for op in operators
        if op.get("state") == "active"
    }


def _started(broker: Broker, queries: tuple[str, ...]) -> bool:
    """Every query active, and the ones with a batch at every trigger past their first batches."""
    batches = _batches(broker)
    return all(q in batches for q in queries) and all(batches[q] >= 2 for q in queries if q in EVERY_TRIGGER)


Figures = tuple[float, float, dict[str, float]]


def _measure(
    work: Path, trigger_ms: int, queries: tuple[str, ...], warm_s: float, window_s: float
) -> Figures:
    """(job cores, broker cores, batches per second by query) of one idle job and its own broker."""
    broker = start_broker(work, extra_args=("--operators", "off"))
    try:
        return _measure_job(broker, work, trigger_ms, queries, warm_s, window_s)
    finally:
        broker.stop()


def _measure_job(
    broker: Broker, work: Path, trigger_ms: int, queries: tuple[str, ...], warm_s: float, window_s: float
) -> Figures:
    command = [
        sys.executable, "-m", "streaming.operators", "--endpoint", broker.url,
        "--path", str(broker.store_dir), "--checkpoint-dir", str(broker.checkpoint_dir),
        "--trigger-ms", str(trigger_ms), "--queries", ",".join(queries),
    ]  # fmt: skip
    with open(work / f"job-{trigger_ms}.log", "wb") as log:
        job = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while not _started(broker, queries):
            if job.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the job did not start its queries (see {work}/job-{trigger_ms}.log)")
            time.sleep(2)
        time.sleep(warm_s)
        pids = _tree(job.pid)
        served = {broker.process.pid}
        job_before, broker_before, batches_before = _cpu_s(pids), _cpu_s(served), _batches(broker)
        started = time.monotonic()
        time.sleep(window_s)
        elapsed = time.monotonic() - started
        job_cores = (_cpu_s(_tree(job.pid) | pids) - job_before) / elapsed
        broker_cores = (_cpu_s(served) - broker_before) / elapsed
        after = _batches(broker)
        rates = {q: (after[q] - batches_before[q]) / elapsed for q in queries if q in after}
        return job_cores, broker_cores, rates
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


def main(argv: list[str] | None = None) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--triggers", default="1000,500", help="delay trigger settings (ms), comma-separated")
    parser.add_argument("--warm", type=float, default=90.0, help="seconds after the first batches")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of CPU sampling")
    parser.add_argument("--queries", default=",".join(QUERIES), help="the resolvers the job runs")
    args = parser.parse_args(argv)
    triggers = [int(t) for t in args.triggers.split(",")]
    queries = tuple(q.strip() for q in args.queries.split(",") if q.strip())
    work = Path(tempfile.mkdtemp(prefix="operators-idle-"))
    print(f"load before {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores; local[2], 2 shards, "
          f"queries {','.join(queries)}; warm {args.warm:.0f} s, window {args.window:.0f} s")  # fmt: skip
    results = []
    for trigger in triggers:
        (work / str(trigger)).mkdir()
        job_cores, broker_cores, rates = _measure(
            work / str(trigger), trigger, queries, args.warm, args.window
        )
        results.append((trigger, job_cores))
        per_query = ", ".join(f"{q} {r:.2f}/s" for q, r in rates.items())
        print(f"delay trigger {trigger:5d} ms: idle job {job_cores:.2f} cores, broker {broker_cores:.3f} "
              f"cores; batches {per_query}")  # fmt: skip
    base_trigger, base = results[-1]
    for trigger, cores in results[:-1]:
        print(f"ratio trigger {trigger} ms / trigger {base_trigger} ms: {cores / base:.2f}")
    print(f"load after {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
