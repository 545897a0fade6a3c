"""POP figures (issue 31): receive + ack of 32 per request by 4 competing consumers, beside
offset-based HTTP pulls of 32-message batches in the same run; redelivery lateness after the
invisible time (p50 / p99). A real ``sparkmq serve`` (operators off). Prints figures; asserts
nothing.

    python -m bench.pop_bench [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.operators.broker_process import Broker, start_broker

CONSUMERS = 4
BATCH = 32
QUEUES = 4


def _fill(http: httpx.Client, topic: str, count: int) -> None:
    http.put(f"/topics/{topic}", json={"queues": QUEUES}).raise_for_status()
    for start in range(0, count, 1000):
        size = min(1000, count - start)
        body = {"messages": [{"body": "x" * 100, "queue_id": (start + i) % QUEUES} for i in range(size)]}
        http.post(f"/topics/{topic}/messages:batch", json=body).raise_for_status()


def _race(url: str, work: Callable[[httpx.Client, int], int], total: int) -> float:
    """msg/s of ``CONSUMERS`` threads running ``work(http, index)`` (messages done per call,
    0 = nothing left for this one) until ``total`` messages are done."""
    done = [0] * CONSUMERS

    def run(index: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while sum(done) < total:
                got = work(http, index)
                if got == 0:
                    return
                done[index] += got

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CONSUMERS)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.perf_counter() - started)


def pop_rate(url: str, topic: str, total: int) -> float:
    def work(http: httpx.Client, _: int) -> int:
        answer = http.post(
            f"/groups/popb/topics/{topic}/messages:receive",
            json={"max_messages": BATCH, "invisible_ms": 60_000, "wait_ms": 0},
        )
        handles = [m["receipt_handle"] for m in answer.raise_for_status().json()["messages"]]
        if handles:
            acked = http.post("/groups/popb/messages:ack", json={"receipt_handles": handles}).json()
            assert acked["acked"] == len(handles), acked
        return len(handles)

    return _race(url, work, total)


def pull_rate(url: str, topic: str, total: int, commit: bool) -> float:
    """Offset-based: consumer i pulls queue i (a partitioned group), committing each batch."""
    offsets = [0] * CONSUMERS
    group = f"pullb-{int(commit)}"

    def work(http: httpx.Client, index: int) -> int:
        answer = http.get(
            f"/topics/{topic}/queues/{index}/messages",
            params={"offset": offsets[index], "max_messages": BATCH},
        ).raise_for_status()
        got = len(answer.json()["messages"])
        offsets[index] += got
        if got and commit:
            body = {"topic": topic, "offsets": {str(index): offsets[index]}}
            http.put(f"/groups/{group}/offsets", json=body).raise_for_status()
        return got

    return _race(url, work, total)


def redelivery_lateness(url: str, topic: str, count: int, invisible_ms: int = 1000) -> list[float]:
    """ms between each message's invisible-until and its redelivery's answer (wall clock)."""
    with httpx.Client(base_url=url, timeout=60) as http:
        due: dict[str, int] = {}
        while len(due) < count:
            answer = http.post(
                f"/groups/redel/topics/{topic}/messages:receive",
                json={"max_messages": BATCH, "invisible_ms": invisible_ms},
            ).json()
            due.update((m["msg_id"], m["invisible_until_ms"]) for m in answer["messages"])
    late: list[float] = []
    lock = threading.Lock()

    def run() -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            while True:
                with lock:
                    if len(late) >= count:
                        return
                answer = http.post(
                    f"/groups/redel/topics/{topic}/messages:receive",
                    json={"max_messages": BATCH, "invisible_ms": 60_000, "wait_ms": 2000},
                ).json()
                now_ms = time.time() * 1000
                with lock:
                    late.extend(
                        now_ms - due[m["msg_id"]] for m in answer["messages"] if m["delivery_attempt"] == 2
                    )

    threads = [threading.Thread(target=run) for _ in range(CONSUMERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return late


def _p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    total = 4_000 if args.quick else 40_000
    root = Path(tempfile.mkdtemp(prefix="sparkmq-popbench-"))
    try:
        broker: Broker = start_broker(root, extra_args=("--operators", "off"))
        try:
            with httpx.Client(base_url=broker.url, timeout=120) as http:
                for topic in ("popt", "pullt", "pullc", "redel"):
                    _fill(http, topic, total if topic != "redel" else 200)
            pull = pull_rate(broker.url, "pullt", total, commit=False)
            pull_commit = pull_rate(broker.url, "pullc", total, commit=True)
            pop = pop_rate(broker.url, "popt", total)
            print(
                f"POP receive+ack, {BATCH} per request, {CONSUMERS} competing consumers: {pop:,.0f} msg/s; "
                f"offset-based HTTP pull of {BATCH}-message batches ({CONSUMERS} consumers, one queue "
                f"each) {pull:,.0f} msg/s, with a commit per batch {pull_commit:,.0f} msg/s; "
                f"ratio {pop / pull:.2f}x (vs pull+commit {pop / pull_commit:.2f}x)"
            )
            late = redelivery_lateness(broker.url, "redel", 200)
            print(
                f"redelivery after the invisible time ({len(late)} messages): p50 {_p(late, 50):.0f} ms, "
                f"p99 {_p(late, 99):.0f} ms late, max {max(late):.0f} ms"
            )
        finally:
            broker.stop(signal.SIGTERM)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
