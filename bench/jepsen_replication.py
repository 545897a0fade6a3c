"""The full Jepsen-style replication run (issues 22 and 33): a replica group of three (sync,
``--min-insync 2``, ``--flush sync``) under HTTP idempotent batches and a confluent-kafka
idempotent producer, with an HTTP and a Kafka consumer committing group offsets, a Kafka
consume-transform-produce loop with transactions and a Spark query writing through the
exactly-once sink, through ``--cycles`` faults in turn: kill -9 of the master, the master paused
past its ZooKeeper session, kill -9 of a slave, the master cut from ZooKeeper (not from its
clients), the master cut from its slaves, a full disk on the master, a full disk on a slave
(``--faults kills`` keeps the first three; the full disks need root, for a tmpfs per member).
Then healed and checked message by message and commit by commit (tests/cluster/jepsen.py,
jepsen_commits.py, jepsen_txn.py). Prints every fault and failover with its time, the failover
times' p50/p99, what each kept-master fault answered, the commits, and the verdict.

    python -m bench.jepsen_replication --cycles 30
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from streaming.register import local_session_builder
from tests.cluster import jepsen, jepsen_commits, jepsen_txn
from tests.support.cluster import ProcessCluster


@contextmanager
def _run_dir(keep: Path | None) -> Iterator[str]:
    """A temporary directory, or ``keep`` (made, and left there)."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="sparkmq-jepsen-") as root:
            yield root
        return
    keep.mkdir(parents=True, exist_ok=True)
    yield str(keep)


def _copy_stores(disks: dict[str, Path], into: Path) -> None:
    """Each member's tmpfs disk copied to ``into/<member>`` (sparse files stay sparse)."""
    into.mkdir(parents=True, exist_ok=True)
    for member, disk in disks.items():
        copy = ["cp", "-a", "--sparse=always", str(disk), str(into / member)]
        copied = subprocess.run(copy, check=False, capture_output=True, text=True)
        if copied.returncode != 0:
            print(f"{member}'s store not kept: {copied.stderr.strip()}")
    print(f"stores kept in {into}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument(
        "--faults",
        choices=("all", "kills", "disks"),
        default="all",
        help="kills: no partitions, no full disks; disks: only the full disks (master, slave)",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--session-timeout-ms", type=int, default=6000, help="ZooKeeper session timeout (the broker default)"
    )
    parser.add_argument(
        "--keep", type=Path, default=None, help="run in this directory and keep it (stores, logs)"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    faults = {"all": jepsen.ALL_FAULTS, "kills": jepsen.KILLS_AND_PAUSES, "disks": jepsen.DISKS}[args.faults]
    with (
        _run_dir(args.keep) as root,
        ExitStack() as stack,
        ProcessCluster.started(Path(root), [], session_timeout_ms=args.session_timeout_ms) as cluster,
    ):
        rig = jepsen.start_group(cluster, stack if args.faults != "kills" else None)
        if args.keep is not None and rig is not None and rig.disks:
            # runs after the brokers stop, before the stack unmounts their tmpfs disks
            stack.callback(_copy_stores, rig.disks, args.keep / "stores")
        history = jepsen.History()
        stop = threading.Event()
        commits = jepsen_commits.CommitHistory()
        workers = [jepsen.HttpProducer(cluster, history, stop), jepsen.KafkaProducer(cluster, history, stop)]
        workers += jepsen_commits.committers(
            cluster, jepsen.MEMBERS, jepsen.TOPIC, jepsen.QUEUES, commits, stop
        )
        loop = jepsen_txn.transformer(cluster, jepsen.MEMBERS, jepsen.TOPIC, jepsen.QUEUES, stop)
        workers.append(loop)
        for worker in workers:
            worker.start()
        spark = local_session_builder("jepsen").config("spark.default.parallelism", "2").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        # A failover between a batch's staging and its commit loses the staged parts (issue 33,
        # open): the query is restarted then, and the checker still decides its output.
        reader = jepsen.SparkReader(spark, cluster, Path(root), restart_on=("sink_staging_error",))
        try:
            jepsen.nemesis(cluster, history, args.cycles, seed=args.seed, rig=rig, faults=faults)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=180)
        try:
            verdict = jepsen.check(cluster, history, reader, commits, txn=True, rig=rig)
        finally:
            reader.stop()
            spark.stop()
    for at, what in history.events:
        print(f"{at:8.2f} s  {what}")
    if reader.restarts:
        print(f"the Spark query was restarted {len(reader.restarts)} time(s): {sorted(set(reader.restarts))}")
    kills = sorted(took for kind, took in verdict.failovers if kind == "kill-master")
    pauses = sorted(took for kind, took in verdict.failovers if kind == "pause-master")
    cuts = sorted(took for kind, took in verdict.failovers if kind == "partition-master")
    print(
        f"\n{args.cycles} cycles in {time.monotonic() - started:.0f} s; "
        f"{verdict.acknowledged:,} acknowledged messages"
    )
    if kills:
        p99 = kills[min(len(kills) - 1, round(0.99 * (len(kills) - 1)))]
        print(
            f"master kill -9 -> first acknowledged produce: p50 {statistics.median(kills):.2f} s, "
            f"p99 {p99:.2f} s, max {kills[-1]:.2f} s ({len(kills)} failovers)"
        )
    if pauses:
        print(
            f"master SIGSTOP -> first acknowledged produce: p50 {statistics.median(pauses):.2f} s "
            f"({len(pauses)} failovers; the pause itself lasts 2.5 session timeouts)"
        )
    if cuts:
        print(
            f"master cut from ZooKeeper -> first acknowledged produce: p50 {statistics.median(cuts):.2f} s, "
            f"max {cuts[-1]:.2f} s ({len(cuts)} failovers)"
        )
    for kind in ("cut-slaves", "full-disk-master", "full-disk-slave"):
        held = [(probe, took) for k, probe, took in history.held if k == kind]
        if held:
            answers = sorted({probe for probe, _ in held})
            back = max(took for _, took in held)
            print(
                f"{kind} ({len(held)}): the master's answer during the fault {answers}; "
                f"writes back at most {back:.2f} s after the heal"
            )
    print(
        f"lost {len(verdict.lost)}, duplicated {len(verdict.duplicated)}, refused-but-stored "
        f"{len(verdict.aborted)}, divergent replicas {len(verdict.divergent)}"
    )
    if verdict.spark_missing is not None:
        print(
            f"Spark query (source -> exactly-once sink) across the faults: "
            f"{len(verdict.spark_missing)} acknowledged missing, "
            f"{len(verdict.spark_duplicated or [])} twice in the sink's topic"
        )
    if verdict.commits is not None:
        by_kind = {k: sum(c.kind == k for c in commits.acknowledged) for k in ("http", "kafka")}
        print(
            f"group commits: {verdict.commits.acknowledged:,} acknowledged (HTTP {by_kind['http']:,}, "
            f"Kafka {by_kind['kafka']:,}; {commits.refused:,} refused, {commits.unknown:,} unknown); "
            f"{len(verdict.commits.went_back)} gone back, {len(verdict.commits.moved)} naming another message"
        )
    if verdict.txn is not None:
        print(
            f"Kafka consume-transform-produce: {loop.committed:,} transactions committed, {loop.aborted} "
            f"aborted, {loop.restarted} producer restarts, {verdict.txn.output:,} output records; "
            f"{len(verdict.txn.missing)} missing, {len(verdict.txn.duplicated)} twice, "
            f"{len(verdict.txn.uncommitted)} past the committed offsets"
        )
        if verdict.txn.missing:
            print(f"of the missing, {len(verdict.txn.hidden)} are stored but not read back read_committed")
        if verdict.txn.missing or verdict.txn.duplicated:
            for line in jepsen_txn.explain(loop, verdict.txn, history.started):
                print(line)
    print("VALID" if verdict.valid else f"INVALID: {verdict}")
    return 0 if verdict.valid else 1


if __name__ == "__main__":
    raise SystemExit(main())
