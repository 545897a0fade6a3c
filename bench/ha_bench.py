"""Replication benchmark (store/ha): slave catch-up and produce throughput with a replica.

    python -m bench.ha_bench [--catchup-mb 1024] [--seconds 5] [--dir /tmp/sparkmq-ha-bench]

The master runs in this process, each slave in its own (``bench.ha_replica``), as brokers do;
replication goes over TCP on 127.0.0.1, every store on disk. In one run:

  * disk ceiling: sequential 1 MiB ``pwrite`` MB/s into a fresh file of the catch-up's size
    (what any replica's copy is bounded by on this machine, measured now);
  * catch-up: a master holding ``--catchup-mb`` of 1 KiB records, then an empty slave starts;
    MB/s until it holds and has dispatched everything (ConsumeQueues), then until its key index
    caught up, and the ratio to the disk ceiling;
  * produce against a lone store, in the same run: batched (``put_batch`` of 100 x 1 KiB) and
    single (``put_message`` of 1 KiB) msg/s, from one producer thread and from
    ``--producers`` threads at once (as a broker's doors call the store), for a lone store, a
    master with an ASYNC slave and a master with a SYNC slave (``min_insync`` 2: every put
    waits for the slave's ack); ratios against the lone store, measured in interleaved rounds
    (the machine is shared).

Goals (issue 22): catch-up >= 200 MB/s; async batched >= 0.9x, sync batched >= 0.7x, single
sync >= 0.5x a lone broker. Benchmarks are not tests: nothing here asserts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.ha_replica import MIB, bench_config
from store import Message, MessageStore
from store.ha import HAConfig, InMemorySyncStateAuthority, ReplicaController, ReplicationMode, SyncState

ROOT = Path(__file__).resolve().parents[1]
BODY = 1024
BATCH = 100


def _fresh(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def _replica(directory: Path, master: str, wait_for: int = 0) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "bench.ha_replica", "--dir", str(directory), "--master", master]
    if wait_for:
        command += ["--wait-for", str(wait_for)]
    child = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    if child.stdout.readline().strip() != "READY":
        raise RuntimeError("the replica process did not start")
    return child


@contextmanager
def _master(
    root: Path, mode: ReplicationMode, min_insync: int
) -> Iterator[tuple[MessageStore, ReplicaController]]:
    authority = InMemorySyncStateAuthority(SyncState(frozenset({1}), 1, 0))
    store = MessageStore.open(bench_config(_fresh(root), replicated=True))
    controller = ReplicaController(
        store, HAConfig(broker_id=1, replication=mode, min_insync=min_insync), authority
    )
    try:
        controller.start()
        controller.become_master(1)
        yield store, controller
    finally:
        controller.close()
        store.destroy()


@contextmanager
def _setup(root: Path, name: str) -> Iterator[MessageStore]:
    """``lone``: a store alone; ``async`` / ``sync``: a master with one slave process in sync."""
    if name == "lone":
        store = MessageStore.open(bench_config(_fresh(root / "lone"), replicated=False))
        try:
            yield store
        finally:
            store.destroy()
        return
    mode = ReplicationMode(name)
    with _master(root / "master", mode, 2 if mode is ReplicationMode.SYNC else 1) as (store, controller):
        slave = _replica(_fresh(root / "slave"), controller.ha_address)
        try:
            deadline = time.monotonic() + 60
            while controller.status().in_sync != {1, 2} and time.monotonic() < deadline:
                time.sleep(0.01)
            yield store
        finally:
            assert slave.stdin is not None
            slave.stdin.close()
            slave.wait(60)
            shutil.rmtree(root / "slave", ignore_errors=True)


def _rate(seconds: float, put: Callable[[], int], threads: int = 1) -> float:
    """Messages per second of ``put`` (returns messages per call) over ``seconds``, called
    from ``threads`` threads at once."""
    counts = [0] * threads
    start = time.perf_counter()

    def run(slot: int) -> None:
        while time.perf_counter() - start < seconds:
            counts[slot] += put()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.perf_counter() - start)


def bench_produce(root: Path, seconds: float, rounds: int, producers: int) -> dict[str, dict[str, float]]:
    bodies = [bytes([65 + i % 26]) * BODY for i in range(BATCH)]
    single = Message(topic="bench", body=bodies[0])
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name in ("lone", "async", "sync"):
            with _setup(root, name) as store:
                store.put_batch("bench", bodies[:1])  # the topic exists before the clock starts

                def batched(s: MessageStore = store) -> int:
                    s.put_batch("bench", bodies)
                    return BATCH

                def one(s: MessageStore = store) -> int:
                    s.put_message(single)
                    return 1

                entry = samples.setdefault(
                    name, {"batched": [], "single": [], "batched xN": [], "single xN": []}
                )
                entry["batched"].append(_rate(seconds, batched))
                entry["single"].append(_rate(seconds, one))
                entry["batched xN"].append(_rate(seconds, batched, producers))
                entry["single xN"].append(_rate(seconds, one, producers))
    return {name: {k: statistics.median(v) for k, v in rates.items()} for name, rates in samples.items()}


def disk_ceiling(root: Path, total: int) -> float:
    """Sequential 1 MiB pwrite MB/s into a fresh sparse file of ``total`` bytes."""
    path = root / "ceiling.bin"
    chunk = b"\x5a" * MIB
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, total)
        start = time.perf_counter()
        for position in range(0, total - MIB + 1, MIB):
            os.pwrite(fd, chunk, position)
        return total / MIB / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def bench_catchup(root: Path, megabytes: int) -> tuple[float, float, float, int]:
    """(MB/s until the slave held and dispatched everything, MB/s until its index caught up,
    the master's own append MB/s, bytes)."""
    with _master(root / "master", ReplicationMode.ASYNC, 1) as (store, controller):
        bodies = [bytes([65 + i % 26]) * BODY for i in range(1000)]
        queues = list(range(8)) * 125
        start = time.perf_counter()
        while store.commitlog_max_offset < megabytes * MIB:
            store.put_batch("bench", bodies, queue_ids=queues)
        total = store.commitlog_max_offset
        appended = total / MIB / (time.perf_counter() - start)
        store.flush()
        slave = _replica(_fresh(root / "slave"), controller.ha_address, wait_for=total)
        assert slave.stdout is not None
        held = float(slave.stdout.readline().split()[1])
        indexed = float(slave.stdout.readline().split()[1])
        slave.wait(60)
        shutil.rmtree(root / "slave", ignore_errors=True)
        return total / MIB / held, total / MIB / indexed, appended, total


def _print_catchup(root: Path, megabytes: int) -> None:
    ceiling = disk_ceiling(root, megabytes * MIB)
    held, indexed, appended, total = bench_catchup(root, megabytes)
    print(f"disk ceiling (1 MiB pwrite, {megabytes} MiB): {ceiling:.0f} MB/s")
    print(f"master batched append (1 KiB records): {appended:.0f} MB/s")
    print(
        f"slave catch-up, {total / MIB:.0f} MiB behind: {held:.0f} MB/s held and dispatched "
        f"({held / ceiling:.2f}x the disk ceiling), {indexed:.0f} MB/s with the key index"
        "   (goal >= 200 MB/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--catchup-mb", type=int, default=1024, help="0: skip the catch-up")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmq-ha-bench")
    args = parser.parse_args()
    root = _fresh(args.dir)
    try:
        if args.catchup_mb:
            _print_catchup(root, args.catchup_mb)
        rates = bench_produce(root, args.seconds, args.rounds, args.producers)
        lone = rates["lone"]
        columns = ("batched", "single", "batched xN", "single xN")
        print(f"produce, 1 KiB, msg/s (ratio to the lone store); xN: {args.producers} producer threads")
        print(f"{'':<24}" + "".join(f"{c:>22}" for c in columns))
        for name, label in (
            ("lone", "lone store"),
            ("async", "master + async slave"),
            ("sync", "master + sync slave"),
        ):
            cells = "".join(f"{rates[name][c]:>14,.0f} ({rates[name][c] / lone[c]:.2f})" for c in columns)
            print(f"{label:<24}{cells}")
        print("goals: async batched >= 0.9x, sync batched >= 0.7x, single sync >= 0.5x a lone broker")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
