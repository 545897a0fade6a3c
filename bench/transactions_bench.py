"""Transaction figures: committed transactions per second over HTTP (1 and 100 messages), the
commit's latency until the messages are readable, and check-backs resolving 10,000 open
transactions. Each throughput is printed beside plain produce measured in the same run.

Runs a real ``sparkmq serve`` (its operator job included: local Spark) on a temporary store and
a real producer check-back server. Prints figures; asserts nothing.

    python -m bench.transactions_bench            # ~3 min on 2 cores
    python -m bench.transactions_bench --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np

from tests.operators.broker_process import JOB_START_TIMEOUT_S, Broker, start_broker
from tests.support.waiting import wait_until

BODY = "x" * 100
CONNECTIONS = 16


async def _call(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str, path: str, body: dict[str, object]
) -> tuple[int, bytes]:
    """One request on a keep-alive connection (a raw client: little client CPU)."""
    data = json.dumps(body).encode()
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def _client(url: str, stop_at: float, transactional: bool | str, latencies: list[float]) -> int:
    """``transactional``: False (plain produce), True (half, then commit: two requests) or
    ``"one"`` (the half with ``"commit": true``: one request)."""
    parsed = httpx.URL(url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    done = 0
    try:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            if transactional == "one":
                status, raw = await _call(
                    reader, writer, parsed.host, "/topics/tx/messages",
                    {"body": BODY, "transaction": {"producer_group": "pg", "commit": True}},
                )  # fmt: skip
                assert status == 201, raw
            elif transactional:
                status, raw = await _call(
                    reader, writer, parsed.host, "/topics/tx/messages",
                    {"body": BODY, "transaction": {"producer_group": "pg"}},
                )  # fmt: skip
                assert status == 201, raw
                txid = json.loads(raw)["transaction_id"]
                status, raw = await _call(
                    reader,
                    writer,
                    parsed.host,
                    f"/transactions/{txid}",
                    {"action": "commit", "producer_group": "pg"},
                )
                assert status == 200, raw
            else:
                status, raw = await _call(
                    reader, writer, parsed.host, "/topics/plain/messages", {"body": BODY}
                )
                assert status == 201, raw
            latencies.append(time.perf_counter() - started)
            done += 1
    finally:
        writer.close()
    return done


async def _load(url: str, seconds: float, transactional: bool | str) -> tuple[float, list[float]]:
    latencies: list[float] = []
    started = time.perf_counter()
    counts = await asyncio.gather(
        *(_client(url, started + seconds, transactional, latencies) for _ in range(CONNECTIONS))
    )
    return sum(counts) / (time.perf_counter() - started), latencies


def single(broker: Broker, seconds: float, rounds: int = 3) -> None:
    """Plain single produce, two-request and one-request transactions, interleaved rounds; medians."""
    asyncio.run(_load(broker.url, 1.0, True))  # warm-up
    rates: dict[str, list[float]] = {"plain": [], "two": [], "one": []}
    p99s: dict[str, list[float]] = {"two": [], "one": []}
    for _ in range(rounds):
        for name, mode in (("plain", False), ("two", True), ("one", "one")):
            rate, lat = asyncio.run(_load(broker.url, seconds, mode))
            rates[name].append(rate)
            if name in p99s:
                p99s[name].append(float(np.percentile(np.array(lat) * 1000, 99)))
    plain, two, one = (float(np.median(rates[k])) for k in ("plain", "two", "one"))
    p99_two, p99_one = float(np.median(p99s["two"])), float(np.median(p99s["one"]))
    print(
        f"single-message transactions ({CONNECTIONS} connections, medians of {rounds} interleaved rounds): "
        f"half + commit {two:,.0f} tx/s (p99 {p99_two:.1f} ms), ratio {two / plain:.2f}x; "
        f"one-request commit {one:,.0f} tx/s (p99 {p99_one:.1f} ms), ratio {one / plain:.2f}x; "
        f"plain single produce {plain:,.0f} msg/s"
    )


def batches(broker: Broker, count: int, size: int = 100) -> None:
    entries = [{"body": BODY}] * size

    def plain(http: httpx.Client) -> None:
        http.post("/topics/plainb/messages:batch", json={"messages": entries}).raise_for_status()

    def transaction(http: httpx.Client) -> None:
        half = http.post(
            "/topics/txb/messages:batch", json={"messages": entries, "transaction": {"producer_group": "pg"}}
        )
        half.raise_for_status()
        txid = half.json()["transaction_id"]
        http.post(
            f"/transactions/{txid}", json={"action": "commit", "producer_group": "pg"}
        ).raise_for_status()

    with httpx.Client(base_url=broker.url, timeout=60) as http:
        started = time.perf_counter()
        for _ in range(count):
            plain(http)
        plain_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(count):
            transaction(http)
        tx_s = time.perf_counter() - started
    print(
        f"{size}-message transactions: {count / tx_s:,.1f} tx/s = {count * size / tx_s:,.0f} msg/s; "
        f"plain {size}-message batches {count * size / plain_s:,.0f} msg/s: ratio {plain_s / tx_s:.2f}x"
    )


def commit_to_visible(broker: Broker, count: int) -> None:
    """From the commit request to the message read by a long-polling consumer."""
    lat: list[float] = []
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        http.put("/topics/vis", json={"queues": 1})
        for i in range(count):
            half = http.post(
                "/topics/vis/messages", json={"body": f"v{i}", "transaction": {"producer_group": "pg"}}
            )
            txid = half.json()["transaction_id"]
            started = time.perf_counter()
            http.post(
                f"/transactions/{txid}", json={"action": "commit", "producer_group": "pg"}
            ).raise_for_status()
            got = http.get(
                "/topics/vis/queues/0/messages", params={"offset": i, "max_messages": 1, "wait_ms": 5000}
            )
            assert got.json()["messages"], "committed message not readable"
            lat.append(time.perf_counter() - started)
    ms = np.array(lat) * 1000
    p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
    print(f"commit to visible: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({count} commits)")


class _Producer(ThreadingHTTPServer):
    answered = 0


def check_backs(root: Path, n: int) -> None:
    """``count`` open transactions, each committed by its producer's answer to the first check."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            server.answered += 1  # type: ignore[attr-defined]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"action": "commit"}).encode())

        def log_message(self, *args: object) -> None:
            pass

    server = _Producer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    broker = start_broker(root, extra_args=("--tx-immunity-ms", "2000", "--tx-check-interval-ms", "5000"))
    try:
        wait_until(
            lambda: any(o["operator"] == "transactions" and o.get("last_batch_id") is not None
                        for o in broker.operators()["operators"]),
            JOB_START_TIMEOUT_S, "the transaction query",
        )  # fmt: skip
        with httpx.Client(base_url=broker.url, timeout=60) as http:
            port = server.server_address[1]
            http.put(
                "/producer-groups/cb", json={"check_url": f"http://127.0.0.1:{port}/check"}
            ).raise_for_status()
            started = time.perf_counter()
            for _ in range(n):
                http.post(
                    "/topics/cbt/messages", json={"body": BODY, "transaction": {"producer_group": "cb"}}
                ).raise_for_status()
            sent_s = time.perf_counter() - started

            def count(state: str) -> int:
                params = {"producer_group": "cb", "state": state, "limit": 10_000}
                return len(http.get("/transactions", params=params).json()["transactions"])

            wait_until(lambda: count("prepared") == 0, 600, f"{n} transactions to end", poll_s=1.0)
            total_s = time.perf_counter() - started
            committed, discarded = count("committed"), count("discarded")
        drain_s = total_s - sent_s
        print(
            f"check-backs: {n:,} open transactions (sent over {sent_s:.1f} s, immunity 2 s): {committed:,} "
            f"committed by their producers' answers, {discarded:,} discarded; the last ended {drain_s:.1f} s "
            f"after the last half was sent; {server.answered:,} checks answered"
        )
    finally:
        broker.stop(signal.SIGKILL)
        server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sparkmq-txbench-"))
    (root / "http").mkdir()
    (root / "checks").mkdir()
    try:
        broker = start_broker(root / "http", extra_args=("--operators", "off"))
        try:
            single(broker, 3.0 if args.quick else 10.0)
            batches(broker, 20 if args.quick else 200)
            commit_to_visible(broker, 100 if args.quick else 500)
        finally:
            broker.stop(signal.SIGTERM)
        check_backs(root / "checks", 1000 if args.quick else 10_000)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
