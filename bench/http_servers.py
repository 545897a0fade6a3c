"""ASGI servers compared on single produce: uvicorn (httptools + uvloop, what ``sparkmq serve``
runs), uvicorn on h11/asyncio, and granian (Rust HTTP), each serving the broker app and a bare
ASGI app (the server's own ceiling), with the same 16-connection client as ``bench.http_bench``.

    python -m bench.http_servers                    # 3 interleaved rounds of 4 s each
    python -m bench.http_servers --rounds 5 --seconds 3

Every server runs one process with the same app factory (:func:`broker_app` on a fresh
temporary store, or :func:`bare_app`); the rounds interleave all of them and medians are
printed with p50/p99 latency. Not a CI gate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.http_bench import _free_port, bench_single

#: The answer of the bare app: a produce result's size.
_BARE_BODY = (
    b'{"msg_id":"7F00000100002A9F0000000000000000","uniq_key":"7F000001000000000000000000000000",'
    b'"topic":"t","queue_id":0,"queue_offset":0,"commitlog_offset":0,"store_timestamp":1763700000000}'
)
_BARE_HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(_BARE_BODY)).encode())]


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the request body and answers 201 with a fixed body: the server's own cost."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    await send({"type": "http.response.start", "status": 201, "headers": _BARE_HEADERS})
    await send({"type": "http.response.body", "body": _BARE_BODY})


def broker_app() -> Any:
    """The broker's app (``create_app``) on the store directory in ``SPARKMQ_BENCH_STORE``."""
    from broker.config import ServerConfig
    from ingest_api.app import create_app
    from store import StoreConfig

    return create_app(ServerConfig(store=StoreConfig(store_dir=Path(os.environ["SPARKMQ_BENCH_STORE"]))))


#: name -> command line serving TARGET on PORT (``--factory`` targets are called).
SERVERS = {
    "uvicorn httptools+uvloop": [
        "-m", "uvicorn", "--http", "httptools", "--loop", "uvloop", "--log-level", "warning",
        "--no-access-log", "--port", "PORT", "FACTORY", "TARGET",
    ],
    "uvicorn h11+asyncio": [
        "-m", "uvicorn", "--http", "h11", "--loop", "asyncio", "--log-level", "warning",
        "--no-access-log", "--port", "PORT", "FACTORY", "TARGET",
    ],
    "granian (1 worker)": [
        "-m", "granian", "--interface", "asgi", "--workers", "1", "--log-level", "warning",
        "--no-ws", "--port", "PORT", "FACTORY", "TARGET",
    ],
}  # fmt: skip
APPS = {"broker": "bench.http_servers:broker_app", "bare ASGI": "bench.http_servers:bare_app"}


@contextlib.contextmanager
def serving(server: str, app: str) -> Iterator[str]:
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="sparkmq-servers-") as store_dir:
        factory = ["--factory"] if app == "broker" else []
        command = [sys.executable]
        for part in SERVERS[server]:
            if part == "FACTORY":
                command += factory
            else:
                command.append({"PORT": str(port), "TARGET": APPS[app]}.get(part, part))
        process = subprocess.Popen(command, env={**os.environ, "SPARKMQ_BENCH_STORE": store_dir})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    httpx.get(f"{url}/healthz", timeout=1)
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{server} did not start")
                time.sleep(0.1)
            if app == "broker":
                httpx.put(f"{url}/topics/bench", json={"queues": 4}, timeout=30).raise_for_status()
            yield url
        finally:
            process.terminate()
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    print(f"single produce, {args.clients} keep-alive connections, {os.cpu_count()} CPUs shared by all")
    rates: dict[tuple[str, str], list[float]] = {}
    latencies: dict[tuple[str, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        urls = {(s, a): stack.enter_context(serving(s, a)) for s in SERVERS for a in APPS}
        for round_no in range(1, args.rounds + 1):
            print(f"round {round_no} (load {os.getloadavg()[0]:.1f}):", flush=True)
            for key, url in urls.items():
                samples = latencies.setdefault(key, [])
                figure = asyncio.run(bench_single(url, "bench", args.seconds, args.clients, samples))
                rates.setdefault(key, []).append(figure.rate)
                print(f"  {key[1]:<10} on {key[0]:<26} {figure.rate:>9,.0f} req/s", flush=True)
    print(f"\n| app | server | req/s (median of {args.rounds}) | p50 ms | p99 ms |\n|---|---|---|---|---|")
    for (server, app), runs in rates.items():
        ordered = sorted(latencies[(server, app)])
        p50, p99 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3 for q in (0.5, 0.99))
        print(f"| {app} | {server} | {statistics.median(runs):,.0f} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
