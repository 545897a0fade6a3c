"""HTTP broker throughput: single produce, JSON batch, Arrow batch, Arrow pull (100-byte bodies).

    python -m bench.http_bench                 # starts `sparkmq serve` on a temp store
    python -m bench.http_bench --url http://127.0.0.1:8080 --seconds 10

Client and server share the machine (and the CPU with anything else running), so the figures
are what this box does end to end, not what the server could do alone. Not a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa

from bench import store_bench
from store import FlushDiskType, MessageStore, StoreConfig
from streaming.backends import ArrowPuller

ARROW = "application/vnd.apache.arrow.stream"
BODY = b"x" * 100


@dataclass
class Figure:
    name: str
    count: int
    seconds: float
    unit: str

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return f"{self.name:<34} {self.rate:>14,.0f} {self.unit}/s   ({self.count:,} in {self.seconds:.2f} s)"


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def local_broker(flush: str = "async") -> Iterator[str]:
    """`sparkmq serve --flush FLUSH` on a temporary store in a child process; stopped with SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-bench-") as store_dir:
        port = _free_port()
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", store_dir,
            "--port", str(port), "--log-level", "warning", "--max-batch", "100000", "--operators", "off",
            "--flush", flush,
        ]  # fmt: skip
        process = subprocess.Popen(command, env=os.environ.copy())
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("broker did not start") from None
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        process.wait(timeout=0.1)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=60)


async def _keepalive_client(
    host: str,
    port: int,
    request: bytes,
    stop_at: float,
    latencies: list[float] | None = None,
    expect: int = 201,
) -> int:
    """One HTTP/1.1 keep-alive connection sending ``request`` until ``stop_at``; raises
    RuntimeError on an answer other than ``expect``. A raw-socket client keeps client CPU
    small, so the figure mostly measures the server. Each request's round trip (seconds) is
    appended to ``latencies`` when given."""
    reader, writer = await asyncio.open_connection(host, port)
    done = 0
    try:
        while (sent_at := time.perf_counter()) < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            if status != expect:
                raise RuntimeError(f"{request.split(b' ', 1)[0].decode()} answered {status}, not {expect}")
            if latencies is not None:
                latencies.append(time.perf_counter() - sent_at)
            done += 1
    finally:
        writer.close()
    return done


async def bench_single(
    url: str, topic: str, seconds: float, clients: int, latencies: list[float] | None = None
) -> Figure:
    parsed = httpx.URL(url)
    body = json.dumps({"body": BODY.decode()}).encode()
    request = (
        f"POST /topics/{topic}/messages HTTP/1.1\r\nHost: {parsed.host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    started = time.perf_counter()
    counts = await asyncio.gather(
        *(
            _keepalive_client(parsed.host, parsed.port or 80, request, started + seconds, latencies)
            for _ in range(clients)
        )
    )
    return Figure(
        f"single produce ({clients} connections)", sum(counts), time.perf_counter() - started, "req"
    )


class KeepAliveClient:
    """A blocking HTTP/1.1 keep-alive connection that sends prepared requests and reads answers
    with a Content-Length: little client CPU next to the server's (httpx parses every header
    and body in Python, which on two shared cores costs as much as a small batch's store write)."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.host = parsed.host
        self.sock = socket.create_connection((parsed.host, parsed.port or 80))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb", buffering=1 << 20)

    def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        self.sock.sendall(head.encode() + b"\r\n" + body)
        status = int(self.reader.readline().split(b" ", 2)[1])
        length = 0
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        return status, self.reader.read(length)

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def batch_request(kind: str, batch_size: int) -> tuple[bytes, str]:
    """(body, media type) of a batch of ``batch_size`` 100-byte messages: json, ndjson or arrow."""
    if kind == "arrow":
        table = pa.table({"body": pa.array([BODY] * batch_size, pa.binary())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue().to_pybytes(), ARROW
    if kind == "ndjson":
        line = json.dumps({"body": BODY.decode()}).encode()
        return b"\n".join([line] * batch_size), "application/x-ndjson"
    return json.dumps({"messages": [{"body": BODY.decode()}] * batch_size}).encode(), "application/json"


def bench_batches(
    url: str, topic: str, seconds: float, batch_size: int, arrow: bool, kind: str | None = None
) -> Figure:
    """Batches of ``kind`` (json, ndjson or arrow; ``arrow`` picks between the first and the
    last) sent one after another on one keep-alive connection for ``seconds``."""
    kind = kind or ("arrow" if arrow else "json")
    content, media = batch_request(kind, batch_size)
    # Arrow batches ask for Arrow results too: the columnar path end to end.
    headers = {"Content-Type": media, "Accept": ARROW if kind == "arrow" else "application/json"}
    sent = 0
    client = KeepAliveClient(url)
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            status, answer = client.request("POST", f"/topics/{topic}/messages:batch", content, headers)
            if status != 201:
                raise RuntimeError(f"batch produce answered {status}: {answer[:200]!r}")
            sent += batch_size
        elapsed = time.perf_counter() - started
    finally:
        client.close()
    label = {"json": "JSON", "ndjson": "NDJSON", "arrow": "Arrow"}[kind]
    return Figure(f"{label} batch produce ({batch_size}/req)", sent, elapsed, "msg")


def bench_arrow_pull(url: str, topic: str, queues: int, page: int, streams: int = 1) -> Figure:
    """Every message of ``topic`` pulled as Arrow pages, with the Spark source's endpoint client
    (``streaming.backends.ArrowPuller``); ``streams`` queues pulled at once, as Spark's tasks do."""
    puller = ArrowPuller(url, 60, {})

    def drain(queue_id: int) -> int:
        received, offset = 0, 0
        while True:
            status, headers, body = puller.get(
                f"/topics/{topic}/queues/{queue_id}/messages", {"offset": offset, "max_messages": page}
            )
            if status != 200:
                raise RuntimeError(f"pull answered {status}")
            rows = pa.ipc.open_stream(pa.py_buffer(body)).read_all().num_rows
            if rows == 0:
                return received
            received += rows
            offset = int(headers["x-next-offset"])

    started = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        received = sum(pool.map(drain, range(queues)))
    elapsed = time.perf_counter() - started
    return Figure(f"Arrow pull ({page}/req, {streams} at once)", received, elapsed, "msg")


def bench_read_batch(count: int, queues: int, page: int) -> Figure:
    """The baseline of the pull: in-process ``read_batch`` of ``count`` messages, same pages."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-bench-read-") as store_dir:
        config = StoreConfig(store_dir=Path(store_dir), commitlog_file_size_bytes=256 << 20)
        with MessageStore.open(config) as store:
            store.create_topic("read", queues)
            for start in range(0, count, 10_000):
                store.put_batch("read", [BODY] * min(10_000, count - start))
            received = 0
            started = time.perf_counter()
            for queue_id in range(queues):
                offset = 0
                while True:
                    result = store.read_batch("read", queue_id, offset, page)
                    if result.batch.num_rows == 0:
                        break
                    received += result.batch.num_rows
                    offset = result.next_offset
            elapsed = time.perf_counter() - started
    return Figure(f"in-process read_batch ({page}/call)", received, elapsed, "msg")


def bench_append(batch_size: int, count: int) -> Figure:
    """The baseline of the batch produces: in-process ``put_batch`` of 100-byte messages,
    ``batch_size`` per call (``bench.store_bench``'s batched append, on a fresh store)."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-bench-append-") as root:
        rate, _ = store_bench.bench_batched_append(
            Path(root), count, len(BODY), FlushDiskType.ASYNC_FLUSH, batch=batch_size
        )
    return Figure(f"in-process put_batch ({batch_size}/call)", count, count / rate, "msg")


def _percentile_ms(latencies: list[float], q: float) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3 if ordered else 0.0


#: (what, HTTP workload, in-process baseline, goal) printed as ratios of the rounds' medians.
RATIOS = [
    ("HTTP JSON batch / in-process append", "JSON batch", "append 10000", ">= 0.4x"),
    ("HTTP NDJSON batch / in-process append", "NDJSON batch", "append 10000", ">= 0.4x"),
    ("HTTP Arrow batch / in-process put_batch", "Arrow batch", "append 10000", ">= 0.8x"),
    ("HTTP JSON batch (10000/req) / in-process append", "JSON batch 10000", "append 10000", ""),
    ("HTTP JSON batch / put_batch of its size (1000)", "JSON batch", "append 1000", ""),
    ("the store's own: put_batch 1000/call / 10000/call", "append 1000", "append 10000", ""),
]


def _workloads(
    url: str, topic: str, seconds: float, clients: int, latencies: list[float]
) -> list[tuple[str, Callable[[], Figure]]]:
    """One round: (key, workload) in the order they run; topics are ``bench_{kind}_{topic}``."""
    return [
        ("append 10000", lambda: bench_append(10_000, 500_000)),
        (
            "single",
            lambda: asyncio.run(bench_single(url, f"bench_single_{topic}", seconds, clients, latencies)),
        ),
        ("JSON batch", lambda: bench_batches(url, f"bench_json_{topic}", seconds, 1000, False)),
        ("NDJSON batch", lambda: bench_batches(url, f"bench_ndjson_{topic}", seconds, 1000, False, "ndjson")),
        ("Arrow batch", lambda: bench_batches(url, f"bench_arrow_{topic}", seconds, 10_000, True)),
        ("JSON batch 10000", lambda: bench_batches(url, f"bench_json10k_{topic}", seconds, 10_000, False)),
        ("append 1000", lambda: bench_append(1000, 200_000)),
    ]


def run(url: str, seconds: float, clients: int, rounds: int = 3) -> dict[str, list[Figure]]:
    """Every produce workload and its in-process baselines once per round, interleaved, so the
    ratios compare figures taken seconds apart on the same shared cores; then the Arrow pull."""
    queues = 4
    suffix = str(int(time.time()))
    figures: dict[str, list[Figure]] = {}
    latencies: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for round_no in range(1, rounds + 1):
            for name in ("single", "json", "ndjson", "arrow", "json10k"):
                http.put(
                    f"/topics/bench_{name}_{suffix}_{round_no}", json={"queues": queues}
                ).raise_for_status()
    for round_no in range(1, rounds + 1):
        print(f"round {round_no} of {rounds} (load {os.getloadavg()[0]:.1f}):", flush=True)
        for key, workload in _workloads(url, f"{suffix}_{round_no}", seconds, clients, latencies):
            figure = workload()
            figures.setdefault(key, []).append(figure)
            print("  " + figure.line(), flush=True)
    print(f"\nmedians of {rounds} interleaved rounds:")
    median = {key: statistics.median(f.rate for f in runs) for key, runs in figures.items()}
    for key, runs in figures.items():
        extra = ""
        if key == "single":
            p50, p99 = _percentile_ms(latencies, 0.5), _percentile_ms(latencies, 0.99)
            extra = f"   p50 {p50:.2f} ms, p99 {p99:.2f} ms (every request of every round)"
        print(f"  {runs[0].name:<34} {median[key]:>14,.0f} {runs[0].unit}/s{extra}")
    print("ratios (same run, medians):")
    for what, top, bottom, goal in RATIOS:
        print(f"  {what:<50} {median[top] / median[bottom]:>6.2f}x  {('goal ' + goal) if goal else ''}")
    pulls = [bench_arrow_pull(url, f"bench_arrow_{suffix}_1", queues, 50_000, streams) for streams in (1, 2)]
    baseline = bench_read_batch(pulls[0].count, queues, 50_000)
    for figure in (*pulls, baseline):
        figures.setdefault("pull", []).append(figure)
        print(figure.line(), flush=True)
    for pull in pulls:
        print(f"  {pull.name}: {pull.rate / baseline.rate:.2f} x in-process read_batch (same run)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Benchmark a running broker instead of starting one.")
    parser.add_argument("--seconds", type=float, default=4.0, help="Duration of each produce phase.")
    parser.add_argument("--clients", type=int, default=16, help="Concurrent single-produce clients.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds (medians are reported).")
    args = parser.parse_args()
    print(f"sparkmq HTTP benchmark: 100-byte bodies, {os.cpu_count()} CPUs shared by client and server")
    if args.url:
        run(args.url, args.seconds, args.clients, args.rounds)
    else:
        with local_broker() as url:
            run(url, args.seconds, args.clients, args.rounds)


if __name__ == "__main__":
    main()
