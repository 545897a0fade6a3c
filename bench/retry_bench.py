"""Send-back figures: send-backs per second over HTTP and from Spark (``streaming.sendback``),
each beside plain single produce measured in the same run. A real ``sparkmq serve`` (operators
off: this measures taking send-backs, not the ladder's delivery). Prints figures; asserts nothing.

    python -m bench.retry_bench [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.transactions_bench import CONNECTIONS, _call
from tests.operators.broker_process import Broker, start_broker


async def _clients(url: str, seconds: float, make: object) -> float:
    parsed = httpx.URL(url)

    async def one(worker: int) -> int:
        reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
        done, stop_at = 0, time.perf_counter() + seconds
        try:
            while time.perf_counter() < stop_at:
                path, body = make(worker, done)  # type: ignore[operator]
                status, raw = await _call(reader, writer, parsed.host, path, body)
                assert status in (200, 201), raw
                done += 1
        finally:
            writer.close()
        return done

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(w) for w in range(CONNECTIONS)))
    return sum(counts) / (time.perf_counter() - started)


def http_send_backs(broker: Broker, seconds: float) -> None:
    with httpx.Client(base_url=broker.url, timeout=60) as http:
        http.put("/groups/bench", json={})
        ids = [
            http.post("/topics/sb/messages", json={"body": "x" * 100}).json()["msg_id"] for _ in range(2000)
        ]
    plain = asyncio.run(
        _clients(broker.url, seconds, lambda w, i: ("/topics/plain/messages", {"body": "x" * 100}))
    )
    rate = asyncio.run(
        _clients(
            broker.url,
            seconds,
            lambda w, i: (
                "/groups/bench/messages:sendBack",
                {"topic": "sb", "msg_id": ids[(w * 997 + i) % len(ids)]},
            ),
        )
    )
    print(
        f"HTTP send-backs: {rate:,.0f}/s ({CONNECTIONS} connections); plain single produce {plain:,.0f}/s "
        f"in the same run: ratio {rate / plain:.2f}x"
    )


def http_send_back_batches(broker: Broker, rounds: int, size: int = 1000) -> None:
    """Send-backs of ``size`` messages per request beside plain JSON batches of ``size`` messages
    (one client, interleaved rounds, medians)."""
    with httpx.Client(base_url=broker.url, timeout=120) as http:
        http.put("/groups/benchb", json={})
        http.post(
            "/topics/sbb/messages:batch", json={"messages": [{"body": "x" * 100}] * size}
        ).raise_for_status()
        ids = [
            m["msg_id"]
            for m in http.get("/topics/sbb/queues/0/messages", params={"max_messages": size}).json()[
                "messages"
            ]
        ]
        for queue in range(1, 8):
            page = http.get(f"/topics/sbb/queues/{queue}/messages", params={"max_messages": size}).json()
            ids += [m["msg_id"] for m in page["messages"]]
        items = [{"topic": "sbb", "msg_id": m} for m in ids[:size]]
        plain_s, batch_s = [], []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(5):
                http.post(
                    "/topics/plainb/messages:batch", json={"messages": [{"body": "x" * 100}] * size}
                ).raise_for_status()
            plain_s.append((time.perf_counter() - started) / 5)
            started = time.perf_counter()
            for _ in range(5):
                http.post("/groups/benchb/messages:sendBack", json=items).raise_for_status()
            batch_s.append((time.perf_counter() - started) / 5)
    plain, sent = size / statistics.median(plain_s), size / statistics.median(batch_s)
    print(
        f"HTTP send-backs, {size} per request: {sent:,.0f}/s; plain {size}-message JSON batches "
        f"{plain:,.0f} msg/s "
        f"in the same run: ratio {sent / plain:.2f}x (medians of {rounds} interleaved rounds)"
    )


def spark_send_backs(broker: Broker, rows: int) -> None:
    from streaming.register import local_session_builder, register
    from streaming.sendback import send_back

    spark = local_session_builder("retry-bench").getOrCreate()
    register(spark)
    with httpx.Client(base_url=broker.url, timeout=60) as http:
        http.put("/groups/sparkbench", json={})
        http.post("/topics/ss/messages:batch", json={"messages": [{"body": "y"}] * rows}).raise_for_status()
    df = spark.read.format("sparkmq").option("endpoint", broker.url).option("topic", "ss").load().cache()
    df.count()
    started = time.perf_counter()
    send_back(df, 0, endpoint=broker.url, group="sparkbench", topic="ss", query="bench", concurrency=16)
    elapsed = time.perf_counter() - started
    print(f"Spark send-backs (streaming.sendback, {rows:,} failed rows in a batch): {rows / elapsed:,.0f}/s")
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sparkmq-retrybench-"))
    try:
        broker = start_broker(root, extra_args=("--operators", "off"))
        try:
            http_send_backs(broker, 3.0 if args.quick else 10.0)
            http_send_back_batches(broker, 3 if args.quick else 7)
            spark_send_backs(broker, 2000 if args.quick else 10_000)
        finally:
            broker.stop(signal.SIGTERM)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
