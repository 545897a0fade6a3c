"""Replica groups against a lone broker, end to end over HTTP (issue 22's figures).

    python -m bench.replication_bench                  # 3 rounds of 5 s, 10 failovers, 1 GiB catch-up
    python -m bench.replication_bench --rounds 5 --failovers 20 --catchup-mb 1024

One run, everything on this machine: a lone broker (the baseline), a replica group of two with
``--replication async`` and one with ``--replication sync --min-insync 2`` (every produce waits
for the slave's ack), each started once and idle while another is measured; the load comes from
separate client processes (raw keep-alive sockets). Rounds interleave the setups and the
medians are compared, as the machine is shared and noisy.

| figure | how |
|---|---|
| batched produce | JSON batches of 1,000 to the master, 2 client processes |
| single produce | single messages to the master, 2 processes x 16 connections |
| failover | ``kill -9`` of the async master, until the new master acknowledges a produce (6 s session) |
| catch-up | ``bench.ha_bench``: an empty slave ``--catchup-mb`` behind, MB/s |
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

from bench import ha_bench
from bench.cluster_bench import CLIENT_PROCESSES, CONNECTIONS, _batch_worker, _create, _single_worker, _spread
from bench.cluster_spark import cpu_seconds
from bench.http_bench import BODY, _free_port, local_broker
from cluster.local_zookeeper import LocalZooKeeper

BATCH = 1000


class Member:
    """One ``sparkmq serve --ha-port`` process of a replica group."""

    def __init__(self, root: Path, zk_url: str, name: str, key: str, mode: list[str]) -> None:
        self.port, self.ha_port = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", str(root / key),
            "--port", str(self.port), "--log-level", "warning", "--max-batch", "100000",
            "--operators", "off", "--cluster", zk_url, "--broker-name", name,
            "--ha-port", str(self.ha_port), "--checkpoint-dir", str(root / f"cp-{key}"), *mode,
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=os.environ.copy(), start_new_session=True)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


def _pid_serving(url: str) -> int | None:
    """The pid of the ``sparkmq serve`` process listening at ``url`` (from /proc cmdlines)."""
    port = url.rsplit(":", 1)[1]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"serve" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1] == port.encode():
                return int(entry.name)
    return None


def _role(member: Member) -> str | None:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return str(httpx.get(f"{member.url}/replica/status", timeout=2).json().get("role"))
    return None


def _master(members: list[Member]) -> Member | None:
    return next((m for m in members if m.process and m.process.poll() is None and _role(m) == "master"), None)


def _wait(what: str, check: object, timeout_s: float = 120.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check() if callable(check) else check
        if value:
            return value
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def _in_sync(member: Member, size: int) -> bool:
    with contextlib.suppress(httpx.HTTPError, ValueError):
        return len(httpx.get(f"{member.url}/replica/status", timeout=2).json().get("in_sync") or []) >= size
    return False


@contextlib.contextmanager
def replica_group(root: Path, zk_url: str, name: str, mode: list[str]) -> Iterator[list[Member]]:
    members = [Member(root, zk_url, name, f"{name}-{i}", mode) for i in (1, 2)]
    try:
        members[0].start()
        _wait(f"{name} master", lambda: _master(members))
        members[1].start()
        _wait(f"{name} in sync", lambda: (m := _master(members)) is not None and _in_sync(m, 2))
        yield members
    finally:
        for member in members:
            member.stop()


def _first_ack_after_kill(members: list[Member]) -> float:
    """Kill the master; seconds until a produce is acknowledged by the new one."""
    master = _master(members)
    assert master is not None
    began = time.monotonic()
    master.kill()
    while True:
        other = next(m for m in members if m is not master)
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.post(
                f"{other.url}/topics/bench/messages", json={"body": "probe", "queue_id": 0}, timeout=5
            )
            if answer.status_code == 201:
                took = time.monotonic() - began
                master.start()  # back as a slave of the new epoch
                _wait(
                    "the group whole again",
                    lambda: (m := _master(members)) is not None and _in_sync(m, 2),
                    180,
                )
                return took
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--catchup-mb", type=int, default=1024)
    args = parser.parse_args(argv)
    single = json.dumps({"body": BODY.decode()}).encode()
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkmq-repl-bench-")))
        zookeeper = LocalZooKeeper(root / "zk", _free_port()).start()
        stack.callback(zookeeper.stop)
        lone = stack.enter_context(local_broker())
        asynchronous = stack.enter_context(replica_group(root, zookeeper.url("/async"), "ra", []))
        synchronous = stack.enter_context(
            replica_group(root, zookeeper.url("/sync"), "rs", ["--replication", "sync", "--min-insync", "2"])
        )
        targets = {"lone": lone}
        for label, group in (("async", asynchronous), ("sync", synchronous)):
            master = _master(group)
            assert master is not None
            targets[label] = master.url
        for url in targets.values():
            _create(url, "bench", 8)
        pool = stack.enter_context(ProcessPoolExecutor(CLIENT_PROCESSES))
        figures: dict[str, list[float]] = {}
        groups = {"async": asynchronous, "sync": synchronous}
        for round_no in range(1, args.rounds + 1):
            print(f"round {round_no}", flush=True)
            for label, url in targets.items():
                members = groups.get(label, [])
                pids = [m.process.pid for m in members if m.process is not None]
                if label == "lone":
                    pids = [pid for pid in [_pid_serving(url)] if pid is not None]
                before = [cpu_seconds([pid]) for pid in pids]
                started = time.perf_counter()
                rate = _spread(pool, [url] * CLIENT_PROCESSES, _batch_worker, "bench", args.seconds, BATCH)
                sent = rate * (time.perf_counter() - started)
                figures.setdefault(f"batched, {label}", []).append(rate)
                used = [cpu_seconds([pid]) - b for pid, b in zip(pids, before, strict=True)]
                names = [_role(m) or "?" for m in members] or ["broker"]
                per = ", ".join(f"{n} {u / sent * 1e6:.1f} us/msg" for n, u in zip(names, used, strict=True))
                print(f"  batched produce, {label:<5} {rate:>12,.0f} msg/s   {per}", flush=True)
            for label in ("lone", "sync"):
                rate = _spread(
                    pool,
                    [targets[label]] * CLIENT_PROCESSES,
                    _single_worker,
                    "bench",
                    args.seconds,
                    CONNECTIONS,
                    single,
                )
                figures.setdefault(f"single, {label}", []).append(rate)
                print(f"  single produce, {label:<5}  {rate:>12,.0f} msg/s", flush=True)
        median = {name: statistics.median(values) for name, values in figures.items()}
        failovers = []
        for n in range(args.failovers):
            took = _first_ack_after_kill(asynchronous)  # min-insync 1: the survivor takes writes alone
            failovers.append(took)
            print(f"  failover {n + 1}: first acknowledged produce {took:.2f} s after kill -9", flush=True)
    catch_up = ha_bench.bench_catchup(Path(tempfile.mkdtemp(prefix="sparkmq-catchup-")), args.catchup_mb)
    print(f"\nmedians of {args.rounds} rounds of {args.seconds:.0f} s:")
    for name, value in median.items():
        print(f"  {name:<26} {value:>12,.0f} msg/s")
    print("\nratios and figures (same run):")
    rows = (
        ("async replication, batched produce", "batched, async", "batched, lone", ">= 0.9x"),
        ("sync replication, batched produce", "batched, sync", "batched, lone", ">= 0.7x"),
        ("single produce, sync", "single, sync", "single, lone", ">= 0.5x"),
    )
    for label, over, under, goal in rows:
        print(f"  {label:<38} {median[over] / median[under]:.2f}x lone   goal {goal}")
    if failovers:
        ordered = sorted(failovers)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        print(f"  failover, master kill -9               p50 {statistics.median(ordered):.2f} s, "
              f"p99 {p99:.2f} s "
              f"({len(ordered)} kills)   goal p50 <= 5 s, p99 <= 10 s")  # fmt: skip
    print(f"  slave catch-up, {args.catchup_mb} MiB behind      {catch_up[0]:.0f} MB/s   goal >= 200 MB/s")


if __name__ == "__main__":
    main()
