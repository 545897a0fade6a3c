"""Storage engine benchmark: prints the figures quoted in the README.

    python -m bench.store_bench [--messages 1000000] [--dir /tmp/sparkmq-bench]

Measures, in-process on this machine (no network):
  * batched append (put_batch, columnar) msgs/s and MB/s for 100 B and 1 KiB bodies,
    ASYNC_FLUSH and SYNC_FLUSH, ConsumeQueue dispatch included;
  * single put_message msgs/s and latency p50/p99 (async flush);
  * batch read (read_batch -> Arrow) msgs/s;
  * key lookup latency (query_by_key) and offset-by-time latency over the whole store;
  * abnormal recovery MB/s (abort left behind, checkpoint at zero: full CRC-checked scan + rebuild).
Benchmarks are not tests: nothing here asserts; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from store import FlushDiskType, Message, MessageStore, StoreConfig

GOALS = {
    "batched append 100 B": "≥ 1,000,000 msg/s",
    "batched append 1 KiB": "≥ 300 MB/s",
    "single put p99 (async)": "≤ 200 µs",
    "batch read": "≥ 2,000,000 msg/s",
    "key lookup p99": "≤ 5 ms",
    "abnormal recovery": "≥ 200 MB/s",
}


def _config(root: Path, **changes: object) -> StoreConfig:
    return StoreConfig(store_dir=root, background_services=True, **changes).validate()  # type: ignore[arg-type]


def _fresh(root: Path) -> Path:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_batched_append(
    root: Path, n: int, body_size: int, flush: FlushDiskType, batch: int
) -> tuple[float, float]:
    ms = MessageStore.open(_config(_fresh(root), flush_disk_type=flush))
    ms.create_topic("bench", 8)
    bodies = [bytes([65 + i % 26]) * body_size for i in range(batch)]
    start = time.perf_counter()
    done = 0
    while done < n:
        ms.put_batch("bench", bodies[: min(batch, n - done)])
        done += min(batch, n - done)
    elapsed = time.perf_counter() - start
    ms.close()
    return n / elapsed, n * body_size / elapsed / 1e6


def bench_single_put(root: Path, n: int) -> tuple[float, float, float]:
    ms = MessageStore.open(_config(_fresh(root)))
    ms.create_topic("bench", 8)
    body = b"x" * 100
    latencies = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        ms.put_message(Message(topic="bench", body=body, queue_id=i % 8))
        latencies.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    ms.close()
    return n / elapsed, _percentile(latencies, 0.5) * 1e6, _percentile(latencies, 0.99) * 1e6


def bench_reads_and_queries(root: Path, n: int) -> dict[str, float]:
    """Fill one store with n messages (keys k0..k(n-1), a few ms apart), then read and query it."""
    ms = MessageStore.open(_config(_fresh(root)))
    ms.create_topic("bench", 4)
    chunk = 50_000
    for base in range(0, n, chunk):
        size = min(chunk, n - base)
        ms.put_batch("bench", [b"y" * 100] * size, keys=[f"k{base + i}" for i in range(size)])
    ms.wait_indexed(600)
    ms.flush()
    figures: dict[str, float] = {"batch read msg/s": read_all(ms, "bench", 4)}

    rng = random.Random(7)
    lookups = _timed(lambda: ms.query_by_key("bench", f"k{rng.randrange(n)}"), 2000)
    figures["key lookup p50 ms"] = _percentile(lookups, 0.5) * 1e3
    figures["key lookup p99 ms"] = _percentile(lookups, 0.99) * 1e3
    first = ms.read_batch("bench", 0, 0, 1).batch.column("store_timestamp")[0].value // 1000
    last = (
        ms.read_batch("bench", 0, ms.max_offset("bench", 0) - 1, 1).batch.column("store_timestamp")[0].value
        // 1000
    )
    by_time = _timed(
        lambda: ms.offset_for_timestamp("bench", rng.randrange(4), rng.randint(first, last)), 2000
    )
    figures["offset-by-time p99 ms"] = _percentile(by_time, 0.99) * 1e3
    ms.close()
    return figures


def _crash_copy(pristine: Path, root: Path) -> int:
    """A copy of ``pristine`` as a crash leaves it (abort file, zero checkpoint, no derived
    structures); returns the CommitLog bytes on disk."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    (root / "abort").write_text("crashed")
    (root / "checkpoint").unlink()
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    return sum(p.stat().st_size for p in (root / "commitlog").iterdir())


def read_all(ms: MessageStore, topic: str, queues: int) -> float:
    """``read_batch`` (to Arrow, 500,000 per call) over every queue of ``topic``: msg/s."""
    start = time.perf_counter()
    rows = 0
    for queue_id in range(queues):
        offset = 0
        while True:
            got = ms.read_batch(topic, queue_id, offset, 500_000)
            if got.batch.num_rows == 0:
                break
            rows += got.batch.num_rows
            offset = got.next_offset
    return rows / (time.perf_counter() - start)


def bench_recovery(root: Path) -> tuple[float, float]:
    """Abnormal recovery of the store in ``root`` (abort file, zero checkpoint): (MB/s of
    CommitLog data recovered, MB of files)."""
    pristine = root.with_name(root.name + "-pristine")
    shutil.rmtree(pristine, ignore_errors=True)
    root.rename(pristine)
    size = _crash_copy(pristine, root)
    start = time.perf_counter()
    ms = MessageStore.open(_config(root))
    elapsed = time.perf_counter() - start
    used = ms.stats().commitlog_max_offset - ms.stats().commitlog_min_offset
    ms.close()
    shutil.rmtree(pristine, ignore_errors=True)
    return used / elapsed / 1e6, size / 1e6


def bench_recovery_vs_decode(root: Path, n: int, rounds: int) -> dict[str, float]:
    """Abnormal recovery MB/s against record decoding alone (:mod:`bench.decode_bench`: the
    same number of 100 B records, CommitLog bytes -> Arrow), interleaved, ``rounds`` rounds;
    medians and their ratio. Each recovery starts from a fresh crash copy of one store."""
    from bench.decode_bench import build_slice
    from store.format.batch_decode import decode_records_to_arrow

    pristine = _fresh(root.with_name(root.name + "-pristine"))
    ms = MessageStore.open(_config(pristine))
    ms.create_topic("bench", 4)
    for base in range(0, n, 50_000):
        size = min(50_000, n - base)
        ms.put_batch("bench", [b"y" * 100] * size, keys=[f"k{base + i}" for i in range(size)])
    ms.wait_indexed(600)
    ms.close()
    data, starts = build_slice(n, 100)
    # Warm-up as decode_bench does: twice, and each run holds the previous batch, so the
    # decode figures are not those of first-touch page faults.
    batch = decode_records_to_arrow(data, starts)
    batch = decode_records_to_arrow(data, starts)
    recovery: list[float] = []
    decode: list[float] = []
    for i in range(rounds):
        _crash_copy(pristine, root)
        start = time.perf_counter()
        ms = MessageStore.open(_config(root))
        elapsed = time.perf_counter() - start
        used = ms.stats().commitlog_max_offset - ms.stats().commitlog_min_offset
        ms.close()
        recovery.append(used / elapsed / 1e6)
        start = time.perf_counter()
        batch = decode_records_to_arrow(data, starts)
        decode.append(len(data) / (time.perf_counter() - start) / 1e6)
        print(f"  round {i + 1}: recovery {recovery[-1]:,.0f} MB/s, decode {decode[-1]:,.0f} MB/s")
    assert batch.num_rows == n
    shutil.rmtree(pristine, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    rec, dec = statistics.median(recovery), statistics.median(decode)
    return {"recovery MB/s": rec, "decode MB/s": dec, "ratio": rec / dec}


def _timed(fn: Callable[[], object], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--messages", type=int, default=1_000_000, help="messages per append run (default 1M)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of recovery vs decode (default 3)")
    parser.add_argument(
        "--only-recovery", action="store_true", help="only abnormal recovery against decoding, interleaved"
    )
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="sparkmq-bench-"))
    n = args.messages
    if args.only_recovery:
        _print_recovery_vs_decode(root, n, args.rounds)
        shutil.rmtree(root, ignore_errors=True)
        return
    print(f"sparkmq store benchmark: {n:,} messages per run, dir {root}")
    rows = []
    for size, label in ((100, "100 B"), (1024, "1 KiB")):
        for flush in (FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH):
            count = n if flush is FlushDiskType.ASYNC_FLUSH else max(n // 4, 10_000)
            rate, mbps = bench_batched_append(root / "append", count, size, flush, batch=10_000)
            rows.append((f"batched append {label}, {flush.value}", f"{rate:,.0f} msg/s", f"{mbps:,.0f} MB/s"))
    rate, p50, p99 = bench_single_put(root / "single", min(n // 10, 50_000))
    rows.append(
        ("single put_message, ASYNC_FLUSH", f"{rate:,.0f} msg/s", f"p50 {p50:.0f} µs / p99 {p99:.0f} µs")
    )
    figures = bench_reads_and_queries(root / "read", n)
    rows.append(("batch read (Arrow)", f"{figures['batch read msg/s']:,.0f} msg/s", ""))
    rows.append(
        (
            "key lookup",
            f"p50 {figures['key lookup p50 ms']:.2f} ms",
            f"p99 {figures['key lookup p99 ms']:.2f} ms",
        )
    )
    rows.append(("offset by time", f"p99 {figures['offset-by-time p99 ms']:.2f} ms", ""))
    mbps, size_mb = bench_recovery(root / "read")
    rows.append(
        ("abnormal recovery (CRC check + rebuild)", f"{mbps:,.0f} MB/s", f"{size_mb:,.0f} MB of files")
    )
    _print_rows(rows)
    _print_recovery_vs_decode(root / "recovery", n, args.rounds)
    print("goals: " + "; ".join(f"{k} {v}" for k, v in GOALS.items()))
    shutil.rmtree(root, ignore_errors=True)


def _print_recovery_vs_decode(root: Path, n: int, rounds: int) -> None:
    print(f"abnormal recovery against decoding alone, {n:,} records of 100 B, {rounds} rounds interleaved:")
    figures = bench_recovery_vs_decode(root, n, rounds)
    print(
        f"  median: recovery {figures['recovery MB/s']:,.0f} MB/s, decode {figures['decode MB/s']:,.0f} MB/s,"
        f" ratio {figures['ratio']:.2f} (goal: ≥ 200 MB/s or ≥ 0.5x decode)"
    )


def _print_rows(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    for name, a, b in rows:
        print(f"  {name:<{width}}  {a:>22}  {b}")


if __name__ == "__main__":
    main()
