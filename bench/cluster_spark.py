"""Spark ``readStream`` over a cluster: rows/s with the topic on two brokers vs on one broker.

    .venv/bin/python -m bench.cluster_spark [--messages 2000000] [--body-bytes 100] [--runs 3]

Issue 21's figure "Spark readStream over 2 brokers >= 1.5x one broker's rows/s". One ZooKeeper
(Debian's package), two clusters on it (their own chroots): ``solo`` (one ``sparkmq serve
--cluster`` process) and ``duo`` (two, the topic's 8 queues placed round robin). Each gets the
same ``--messages`` messages of ``--body-bytes`` bytes, produced over HTTP Arrow batches (each
row forwarded to its queue's owner). The figure is the one of ``bench.spark_bench``: one
``Trigger.AvailableNow`` micro-batch (no rate limit, ``noop`` sink, ``minPartitions`` partitions,
``local[2]``), ``numInputRows / durationMs.addBatch``, the source's ``endpoint`` the first broker
of each cluster (so each queue is read at its owner, :mod:`streaming.cluster_backend`).
Runs alternate solo, duo, solo, ... after a warm-up of each; the ratio is of the medians.
Each run also prints the CPU the broker processes spent per million rows read (``/proc``), which
does not depend on how loaded the machine is: with about 0.6-0.7 s per 1M rows, one broker
process caps a read at roughly 1.5M rows/s, which is what a second broker lifts; Spark's own
ingestion (the rest of the 2 cores) caps both.
Not a CI gate; the machine is shared, so read the ratio, not the absolute figures.

:func:`spark_read_figure` is the function ``bench.cluster_bench`` calls.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from bench.spark_bench import one_batch, spark_session
from cluster.local_zookeeper import LocalZooKeeper
from tests.support.cluster import ProcessCluster
from tests.support.network import free_port
from tests.support.waiting import wait_until

TOPIC = "bench"
QUEUES = 8
BATCH_ROWS = 10_000
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of processes ``pids`` (``/proc/<pid>/stat``), seconds."""
    total = 0
    for pid in pids:
        try:
            fields = _stat(pid)
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / CLOCK_TICKS


def fill(url: str, messages: int, body_bytes: int) -> None:
    """``messages`` random bodies into ``TOPIC`` through one broker, spread over every queue."""
    rng = np.random.default_rng(7)
    with httpx.Client(base_url=url, timeout=120) as http:
        for first in range(0, messages, BATCH_ROWS):
            n = min(BATCH_ROWS, messages - first)
            blob = rng.integers(0, 256, size=n * body_bytes, dtype=np.uint8).tobytes()
            offsets = pa.array(np.arange(n + 1, dtype=np.int32) * body_bytes)
            bodies = pa.BinaryArray.from_buffers(
                pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(blob)]
            )
            queue_ids = pa.array(np.arange(first, first + n, dtype=np.int32) % QUEUES)
            table = pa.table({"body": bodies, "queue_id": queue_ids})
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            answer = http.post(
                f"/topics/{TOPIC}/messages:batch",
                content=sink.getvalue().to_pybytes(),
                headers={"content-type": "application/vnd.apache.arrow.stream"},
            )
            if answer.status_code != 201:
                raise RuntimeError(f"produce failed: {answer.status_code} {answer.text[:300]}")


def start_cluster(stack: ExitStack, root: Path, zk: LocalZooKeeper, names: Sequence[str]) -> ProcessCluster:
    cluster = stack.enter_context(ProcessCluster.started(root, names, zookeeper=zk))
    with cluster.http(names[0]) as http:
        answer = http.put(f"/topics/{TOPIC}", json={"queues": QUEUES})
        if answer.status_code not in (200, 201):
            raise RuntimeError(f"topic: {answer.status_code} {answer.text}")
    for name in names:
        with cluster.http(name) as http:

            def routed(client: httpx.Client = http) -> bool:
                return client.get(f"/topics/{TOPIC}/route").status_code == 200

            wait_until(routed, 10, f"{name} to route {TOPIC}")
    return cluster


def spark_read_figure(
    messages: int = 2_000_000, body_bytes: int = 100, runs: int = 3, partitions: int = 2, spark: Any = None
) -> dict[str, float]:
    """Median rows/s of an AvailableNow read of the topic on one broker and on two, and their
    ratio: ``{"one_broker_rows_s", "two_brokers_rows_s", "ratio"}``. Prints every run."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-cluster-spark-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        zk = LocalZooKeeper(root / "zookeeper", free_port()).start()
        stack.callback(zk.stop)
        clusters = {
            "one broker": start_cluster(stack, root / "solo", zk, ["solo"]),
            "two brokers": start_cluster(stack, root / "duo", zk, ["b1", "b2"]),
        }
        for label, cluster in clusters.items():
            url = next(iter(cluster.brokers.values())).url
            fill(url, messages, body_bytes)
            print(f"{label}: {messages:,} x {body_bytes} B messages over {len(cluster.brokers)} broker(s)")
        spark = spark or spark_session()
        options = {
            label: {"endpoint": next(iter(c.brokers.values())).url, "minPartitions": str(partitions)}
            for label, c in clusters.items()
        }
        for label in clusters:  # warm-up: Python workers, page cache, connections
            one_batch(spark, "sparkmq", options[label])
        rates: dict[str, list[float]] = {label: [] for label in clusters}
        brokers = {
            label: [b.process.pid for b in c.brokers.values() if b.process] for label, c in clusters.items()
        }
        for run in range(runs):
            for label in clusters:
                before = cpu_seconds(brokers[label])
                rows, seconds = one_batch(spark, "sparkmq", options[label])
                broker_cpu = (cpu_seconds(brokers[label]) - before) * 1e6 / rows
                if rows != messages:
                    raise RuntimeError(f"{label}: read {rows:,} rows, expected {messages:,}")
                rates[label].append(rows / seconds)
                print(
                    f"run {run + 1}  {label:<12} addBatch {seconds:6.2f} s  {rows / seconds:>12,.0f} rows/s"
                    f"   brokers' CPU {broker_cpu:.2f} s per 1M rows"
                )
    one = statistics.median(rates["one broker"])
    two = statistics.median(rates["two brokers"])
    print("\nSpark readStream, median over runs:")
    print(f"  one broker   {one:>12,.0f} rows/s")
    print(f"  two brokers  {two:>12,.0f} rows/s")
    print(f"  ratio two / one: {two / one:.2f}x (goal >= 1.5x)")
    return {"one_broker_rows_s": one, "two_brokers_rows_s": two, "ratio": two / one}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args(argv)
    spark_read_figure(args.messages, args.body_bytes, args.runs, args.partitions)


if __name__ == "__main__":
    main()
