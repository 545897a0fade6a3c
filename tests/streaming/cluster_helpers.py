"""Helpers of the Spark tests over a cluster: producing unique ids, reading a topic back from
every owner, polling a Parquet output. Not a conftest: imported by the cluster Spark tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import pyarrow as pa

from streaming.cluster_backend import ClusterBackend

ARROW_STREAM = "application/vnd.apache.arrow.stream"


def ids(start: int, count: int) -> list[bytes]:
    return [b"id-%07d" % i for i in range(start, start + count)]


def produce(
    url: str,
    topic: str,
    bodies: Sequence[bytes],
    *,
    keyed: bool = True,
    queue_ids: Sequence[int] | None = None,
    batch: int = 10_000,
) -> None:
    """Arrow batches to broker ``url`` (which forwards each row to its queue's owner): with
    ``keyed`` each row's sharding key is its body; ``queue_ids`` pins queues instead."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for start in range(0, len(bodies), batch):
            part = list(bodies[start : start + batch])
            columns: dict[str, Any] = {"body": pa.array(part, pa.binary())}
            if queue_ids is not None:
                columns["queue_id"] = pa.array(queue_ids[start : start + batch], pa.int32())
            elif keyed:
                columns["sharding_key"] = pa.array([b.decode() for b in part], pa.string())
            table = pa.table(columns)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            answer = http.post(
                f"/topics/{topic}/messages:batch",
                content=sink.getvalue().to_pybytes(),
                headers={"content-type": ARROW_STREAM},
            )
            assert answer.status_code == 201, answer.text[:1000]


def topic_rows(url: str, topic: str) -> list[dict[str, Any]]:
    """Every row of ``topic`` read at each queue's owner (MESSAGE_SCHEMA dicts)."""
    backend = ClusterBackend(url, timeout_s=30)
    rows: list[dict[str, Any]] = []
    for queue_id, (low, high) in sorted(backend.queue_heads(topic).items()):
        offset = low
        while offset < high:
            chunk = backend.read_range(
                topic, queue_id, offset=offset, end_offset=high, max_messages=50_000, tags="*"
            )
            rows += chunk.batch.to_pylist()
            offset = chunk.next_offset
    return rows


def parquet_bodies(spark: Any, path: str) -> list[bytes]:
    try:
        return [bytes(r.body) for r in spark.read.parquet(path).select("body").collect()]
    except Exception as exc:  # no file committed yet
        if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return []
        raise
