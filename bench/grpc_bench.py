"""The gRPC door's send rate against HTTP single produce, in the same run (issue 31's figure:
gRPC SendMessage with the official Python client, 16 threads, >= 1x HTTP single produce).

    python -m bench.grpc_bench                  # `sparkmq serve --grpc-port` on a temp store
    python -m bench.grpc_bench --seconds 10 --threads 16

One broker serves both doors; the gRPC figure is RocketMQ 5's official Python client
(``rocketmq-python-client``, in its own venv: tests/support/rocketmq5.py) with one Producer
shared by ``--threads`` threads; the HTTP figure is :func:`bench.http_bench.bench_single` with as
many keep-alive connections. The Python client costs far more CPU per message than the raw
HTTP client, and both share this machine with the broker: the ratio is what this box does
end to end, not what the door could do alone. Not a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench.http_bench import Figure, _free_port, bench_single, cpu_seconds
from tests.support.rocketmq5 import run_client

BODY_BYTES = 100


@contextlib.contextmanager
def grpc_broker() -> Iterator[tuple[str, str, int]]:
    """``sparkmq serve --grpc-port`` on a temporary store in a child process: ``(HTTP url,
    gRPC endpoint, pid)``; stopped with SIGTERM."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-grpc-bench-") as store_dir:
        port, grpc_port = _free_port(), _free_port()
        command = [
            sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", store_dir,
            "--port", str(port), "--grpc-port", str(grpc_port), "--log-level", "warning",
            "--operators", "off",
        ]  # fmt: skip
        process = subprocess.Popen(command, env=os.environ.copy())
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("broker did not start")
                time.sleep(0.1)
            yield url, f"127.0.0.1:{grpc_port}", process.pid
        finally:
            process.terminate()
            process.wait(timeout=60)


def _rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def bench_grpc_send(endpoint: str, topic: str, seconds: float, threads: int, home: Path) -> Figure:
    """SendMessage through the official Python client: one Producer, ``threads`` threads."""
    argument = {"endpoint": endpoint, "topic": topic, "threads": threads, "seconds": seconds}
    argument["body_bytes"] = BODY_BYTES
    (result,) = run_client("send_bench.py", argument, home, timeout_s=seconds + 120)
    if result["errors"]:
        print(f"  ({result['errors']} sends failed)")
    if result["sent"]:
        sending_ms = result["cpu_s"] * 1000 / result["sent"]
        print(f"  (the official client's CPU while sending: {sending_ms:.3f} ms a message)")
    return Figure(f"gRPC SendMessage ({threads} threads)", result["sent"], result["seconds"], "msg")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=16, help="gRPC sender threads = HTTP connections.")
    args = parser.parse_args()
    with grpc_broker() as (url, endpoint, pid), tempfile.TemporaryDirectory() as home:
        with httpx.Client(base_url=url) as http:
            http.put("/topics/bench_http", json={"queues": 8})
            http.put("/topics/bench_grpc", json={"queues": 8})
        before, own = cpu_seconds(pid), _rusage_s(resource.RUSAGE_SELF)
        http_figure = asyncio.run(bench_single(url, "bench_http", args.seconds, args.threads))
        between, own_after, children = (
            cpu_seconds(pid),
            _rusage_s(resource.RUSAGE_SELF),
            _rusage_s(resource.RUSAGE_CHILDREN),
        )
        grpc_figure = bench_grpc_send(endpoint, "bench_grpc", args.seconds, args.threads, Path(home))
        after = cpu_seconds(pid)  # includes the client's start (routes, settings): a few ms
        client = _rusage_s(resource.RUSAGE_CHILDREN) - children  # the official client's process, reaped
    for figure in (http_figure, grpc_figure):
        print(figure.line())
    ratio = grpc_figure.rate / http_figure.rate if http_figure.rate else 0.0
    print(f"{'gRPC / HTTP single produce':<34} {ratio:>14.2f} x   (goal >= 1x)")
    http_ms = (between - before) * 1000 / max(1, http_figure.count)
    grpc_ms = (after - between) * 1000 / max(1, grpc_figure.count)
    load = os.getloadavg()[0]
    print(f"broker CPU per message: HTTP {http_ms:.3f} ms, gRPC {grpc_ms:.3f} ms; load {load:.1f}")
    # The clients' own cost, on the same cores: the HTTP bench's client runs in this process;
    # the official client's figure includes its interpreter's start and its Producer's setup.
    http_client_ms = (own_after - own) * 1000 / max(1, http_figure.count)
    grpc_client_ms = client * 1000 / max(1, grpc_figure.count)
    print(f"client CPU per message: HTTP {http_client_ms:.3f} ms, gRPC {grpc_client_ms:.3f} ms")


if __name__ == "__main__":
    main()
