"""Several brokers against one: the reason for a cluster (issue 21's figures).

    python -m bench.cluster_bench                    # 3 rounds of 5 s per measure
    python -m bench.cluster_bench --rounds 5 --seconds 8 --skip-spark

Everything runs on this machine: one ZooKeeper, a lone broker (the baseline), a cluster of two
brokers and a cluster of one (for the route lookup's cost), all started once and idle while
another is measured; the load comes from separate client processes (raw keep-alive sockets,
little client CPU). The rounds interleave the setups, so each ratio compares figures measured
back to back on this shared, noisy machine; the medians of the rounds are printed.

| figure | how |
|---|---|
| aggregate single produce | the same client processes, spread over both brokers vs all on the lone broker |
| JSON batch produce (1,000/req) | likewise, unkeyed batches (each stays on the broker that received it) |
| produce to a non-owner | single produce of queue 1 (owned by b2) sent to b1 (forwarded) vs sent to b2 |
| route lookup overhead | a cluster of one broker vs the lone broker (same process count) |
| Kafka produce, Spark readStream | bench.cluster_kafka / bench.cluster_spark, when present |
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx

from bench.http_bench import BODY, KeepAliveClient, _free_port, _keepalive_client, local_broker
from cluster.local_zookeeper import LocalZooKeeper

#: Client processes and connections per process for the single-produce figures.
CLIENT_PROCESSES = 2
CONNECTIONS = 16
BATCH = 1000


def _wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while True:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"broker {url} did not start")
        time.sleep(0.1)


@contextlib.contextmanager
def cluster_brokers(zk_url: str, names: list[str]) -> Iterator[dict[str, str]]:
    """``sparkmq serve --cluster`` processes on temporary stores: name -> URL."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-cluster-bench-") as root:
        processes: dict[str, subprocess.Popen[bytes]] = {}
        urls: dict[str, str] = {}
        try:
            for name in names:
                port = _free_port()
                command = [
                    sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", f"{root}/{name}",
                    "--port", str(port), "--log-level", "warning", "--max-batch", "100000",
                    "--operators", "off", "--cluster", zk_url, "--broker-name", name,
                    "--checkpoint-dir", f"{root}/checkpoints-{name}",
                ]  # fmt: skip
                processes[name] = subprocess.Popen(command, env=os.environ.copy())
                urls[name] = f"http://127.0.0.1:{port}"
            for name, url in urls.items():
                _wait_healthy(url, processes[name])
            yield urls
        finally:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                process.wait(timeout=60)


def _single_worker(url: str, topic: str, seconds: float, connections: int, body: bytes) -> int:
    """One client process: ``connections`` keep-alive connections producing for ``seconds``."""
    parsed = httpx.URL(url)
    request = (
        f"POST /topics/{topic}/messages HTTP/1.1\r\nHost: {parsed.host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    async def run() -> int:
        stop_at = time.perf_counter() + seconds
        counts = await asyncio.gather(
            *(_keepalive_client(parsed.host, parsed.port or 80, request, stop_at) for _ in range(connections))
        )
        return sum(counts)

    return asyncio.run(run())


def _batch_worker(url: str, topic: str, seconds: float, batch: int) -> int:
    """One client process sending JSON batches of ``batch`` unkeyed messages for ``seconds``."""
    content = json.dumps({"messages": [{"body": BODY.decode()}] * batch}).encode()
    headers = {"Content-Type": "application/json"}
    client = KeepAliveClient(url)
    sent = 0
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            status, answer = client.request("POST", f"/topics/{topic}/messages:batch", content, headers)
            if status != 201:
                raise RuntimeError(f"batch produce answered {status}: {answer[:200]!r}")
            sent += batch
    finally:
        client.close()
    return sent


def machine_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs so far (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


#: The machine's CPU use during the last :func:`_spread` (0..1 of every core).
LAST_BUSY = [0.0]


def _spread(pool: ProcessPoolExecutor, targets: list[str], job: Callable[..., int], *args: object) -> float:
    """Run ``job(url, *args)`` in one client process per target at once; messages per second.
    How busy the whole machine was meanwhile is left in :data:`LAST_BUSY`."""
    busy0, total0 = machine_busy()
    started = time.perf_counter()
    futures = [pool.submit(job, url, *args) for url in targets]
    total = sum(future.result() for future in futures)
    elapsed = time.perf_counter() - started
    busy1, total1 = machine_busy()
    LAST_BUSY[0] = (busy1 - busy0) / max(1, total1 - total0)
    return total / elapsed


def _create(url: str, topic: str, queues: int) -> None:
    answer = httpx.put(f"{url}/topics/{topic}", json={"queues": queues}, timeout=30)
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"creating {topic}: {answer.status_code} {answer.text}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip-kafka", action="store_true")
    parser.add_argument("--skip-spark", action="store_true")
    args = parser.parse_args(argv)
    seconds = args.seconds
    single_body = json.dumps({"body": BODY.decode()}).encode()
    forwarded_body = json.dumps({"body": BODY.decode(), "queue_id": 1}).encode()
    with contextlib.ExitStack() as stack:
        zk_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="sparkmq-zk-"))
        zookeeper = LocalZooKeeper(Path(zk_dir), _free_port()).start()
        stack.callback(zookeeper.stop)
        lone = stack.enter_context(local_broker())
        pair = stack.enter_context(cluster_brokers(zookeeper.url("/pair"), ["b1", "b2"]))
        solo = stack.enter_context(cluster_brokers(zookeeper.url("/solo"), ["s1"]))
        for url in (lone, pair["b1"], solo["s1"]):
            _create(url, "bench", 8)
        _create(pair["b1"], "fwd", 2)  # queue 0 on b1, queue 1 on b2
        pool = stack.enter_context(ProcessPoolExecutor(CLIENT_PROCESSES))
        figures: dict[str, list[float]] = {}

        def record(name: str, value: float) -> None:
            figures.setdefault(name, []).append(value)
            print(f"  {name:<44} {value:>12,.0f} msg/s   machine CPU {LAST_BUSY[0]:.0%} busy", flush=True)

        for round_no in range(1, args.rounds + 1):
            print(f"round {round_no}", flush=True)
            per = (seconds, CONNECTIONS, single_body)
            record(
                "single, lone broker", _spread(pool, [lone] * CLIENT_PROCESSES, _single_worker, "bench", *per)
            )
            record(
                "single, 2 brokers", _spread(pool, [pair["b1"], pair["b2"]], _single_worker, "bench", *per)
            )
            record(
                "single, cluster of 1",
                _spread(pool, [solo["s1"]] * CLIENT_PROCESSES, _single_worker, "bench", *per),
            )
            batch = (seconds, BATCH)
            record(
                "JSON batch, lone broker",
                _spread(pool, [lone] * CLIENT_PROCESSES, _batch_worker, "bench", *batch),
            )
            record(
                "JSON batch, 2 brokers",
                _spread(pool, [pair["b1"], pair["b2"]], _batch_worker, "bench", *batch),
            )
            fwd = (seconds, CONNECTIONS, forwarded_body)
            record(
                "queue 1 sent to b2 (owner)",
                _spread(pool, [pair["b2"]] * CLIENT_PROCESSES, _single_worker, "fwd", *fwd),
            )
            record(
                "queue 1 sent to b1 (forwarded)",
                _spread(pool, [pair["b1"]] * CLIENT_PROCESSES, _single_worker, "fwd", *fwd),
            )
        median = {name: statistics.median(values) for name, values in figures.items()}

        def ratio(over: str, under: str) -> float:
            return median[over] / median[under]

        rows = [
            ("aggregate HTTP single produce", ratio("single, 2 brokers", "single, lone broker"), ">= 1.6x"),
            ("JSON batch produce", ratio("JSON batch, 2 brokers", "JSON batch, lone broker"), ">= 1.6x"),
            (
                "produce sent to a non-owner (forwarded)",
                ratio("queue 1 sent to b1 (forwarded)", "queue 1 sent to b2 (owner)"),
                ">= 0.5x direct",
            ),
            (
                "route lookup: cluster of 1 / lone broker",
                ratio("single, cluster of 1", "single, lone broker"),
                ">= 0.95x (overhead <= 5%)",
            ),
        ]
        if not args.skip_kafka:
            with contextlib.suppress(ImportError):
                from bench import cluster_kafka

                rows.append(("confluent-kafka produce", cluster_kafka.ratio(zookeeper, seconds), ">= 1.5x"))
        if not args.skip_spark:
            with contextlib.suppress(ImportError):
                from bench import cluster_spark

                spark = cluster_spark.spark_read_figure(runs=args.rounds)
                rows.append(("Spark readStream over 2 brokers", spark["ratio"], ">= 1.5x"))
        print(f"\nmedians of {args.rounds} rounds of {seconds:.0f} s ({CLIENT_PROCESSES} client processes):")
        for name, values in figures.items():
            print(f"  {name:<44} {statistics.median(values):>12,.0f} msg/s")
        print("\nratios (same run):")
        for name, ratio, goal in rows:
            print(f"  {name:<44} {ratio:>6.2f}x   goal {goal}")


if __name__ == "__main__":
    main()
