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
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa

from store import MessageStore, StoreConfig
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
    host: str, port: int, request: bytes, stop_at: float, latencies: list[float] | None = None
) -> int:
    """One HTTP/1.1 keep-alive connection sending ``request`` until ``stop_at``. A raw-socket
    client keeps client CPU small, so the figure mostly measures the server. Each request's
    round trip (seconds) is appended to ``latencies`` when given."""
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
            if status != 201:
                raise RuntimeError(f"produce answered {status}")
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


def bench_batches(url: str, topic: str, seconds: float, batch_size: int, arrow: bool) -> Figure:
    if arrow:
        table = pa.table({"body": pa.array([BODY] * batch_size, pa.binary())})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        content, media = sink.getvalue().to_pybytes(), ARROW
    else:
        content = json.dumps({"messages": [{"body": BODY.decode()}] * batch_size}).encode()
        media = "application/json"
    headers = {"content-type": media, "accept": media}
    sent = 0
    with httpx.Client(base_url=url, timeout=60) as http:
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            # Arrow batches ask for Arrow results too: the columnar path end to end.
            response = http.post(f"/topics/{topic}/messages:batch", content=content, headers=headers)
            response.raise_for_status()
            sent += batch_size
        elapsed = time.perf_counter() - started
    kind = "Arrow" if arrow else "JSON"
    return Figure(f"{kind} batch produce ({batch_size}/req)", sent, elapsed, "msg")


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


def run(url: str, seconds: float, clients: int) -> list[Figure]:
    queues = 4
    suffix = str(int(time.time()))
    with httpx.Client(base_url=url, timeout=30) as http:
        for name in ("single", "json", "arrow"):
            http.put(f"/topics/bench_{name}_{suffix}", json={"queues": queues}).raise_for_status()
    figures = [asyncio.run(bench_single(url, f"bench_single_{suffix}", seconds, clients))]
    print(figures[-1].line(), flush=True)
    figures.append(bench_batches(url, f"bench_json_{suffix}", seconds, 1000, arrow=False))
    print(figures[-1].line(), flush=True)
    figures.append(bench_batches(url, f"bench_arrow_{suffix}", seconds, 10_000, arrow=True))
    print(figures[-1].line(), flush=True)
    pulls = [bench_arrow_pull(url, f"bench_arrow_{suffix}", queues, 50_000, streams) for streams in (1, 2)]
    baseline = bench_read_batch(pulls[0].count, queues, 50_000)
    for figure in (*pulls, baseline):
        figures.append(figure)
        print(figure.line(), flush=True)
    for pull in pulls:
        print(f"  {pull.name}: {pull.rate / baseline.rate:.2f} x in-process read_batch (same run)")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Benchmark a running broker instead of starting one.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Duration of each produce phase.")
    parser.add_argument("--clients", type=int, default=16, help="Concurrent single-produce clients.")
    args = parser.parse_args()
    print(f"sparkmq HTTP benchmark: 100-byte bodies, {os.cpu_count()} CPUs shared by client and server")
    if args.url:
        run(args.url, args.seconds, args.clients)
    else:
        with local_broker() as url:
            run(url, args.seconds, args.clients)


if __name__ == "__main__":
    main()
