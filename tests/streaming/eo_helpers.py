"""Helpers of the exactly-once sink tests: part batches, reading a whole topic back, counting.

Not a conftest: imported explicitly by ``test_sink*.py`` / ``test_exactly_once*.py``.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from store import is_system_topic
from store.publish.sink_parts import PART_SCHEMA
from tests.support.stores import light_config
from tests.support.waiting import wait_until


def part_batch(
    bodies: Sequence[bytes],
    topic: str = "out",
    *,
    tags: Sequence[str | None] | None = None,
    keys: Sequence[str | None] | None = None,
    properties: Sequence[dict[str, str] | None] | None = None,
    queue_ids: Sequence[int | None] | None = None,
    sharding_keys: Sequence[str | None] | None = None,
    delay_levels: Sequence[int | None] | None = None,
) -> pa.RecordBatch:
    """A staged-part batch (``PART_SCHEMA``) for ``bodies``; absent columns are all null."""
    n = len(bodies)
    none: list[None] = [None] * n

    def col(values: Sequence[Any] | None) -> Sequence[Any]:
        return none if values is None else values

    props = [None if p is None else list(p.items()) for p in col(properties)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(list(bodies), pa.binary()),
            pa.array(col(tags), pa.string()),
            pa.array(col(keys), pa.string()),
            pa.array(props, PART_SCHEMA.field("properties").type),
            pa.array(col(queue_ids), pa.int32()),
            pa.array(col(sharding_keys), pa.string()),
            pa.array(col(delay_levels), pa.int32()),
        ],
        schema=PART_SCHEMA,
    )


def topic_rows(store: Any, topic: str) -> list[dict[str, Any]]:
    """Every message of ``topic`` (all queues, queue order) as dicts of MESSAGE_SCHEMA fields."""
    rows: list[dict[str, Any]] = []
    if topic not in store.topics() and not is_system_topic(topic):
        return rows
    for queue_id, (lo, hi) in sorted(store.queue_offsets(topic).items()):
        offset = lo
        while offset < hi:
            got = store.read_batch(topic, queue_id, offset, 100_000)
            rows.extend(got.batch.to_pylist())
            if got.next_offset <= offset:
                break
            offset = got.next_offset
    return rows


def topic_bodies(store: Any, topic: str) -> list[bytes]:
    return [bytes(r["body"]) for r in topic_rows(store, topic)]


def reader_bodies(store_dir: Path, topic: str) -> list[bytes]:
    """Bodies of ``topic`` through a lock-free :class:`store.StoreReader` (the store may be open)."""
    from store.read.store_reader import StoreReader

    with StoreReader(store_dir) as reader:
        return topic_bodies(reader, topic)


def assert_exactly_once(bodies: Iterable[bytes], expected: Iterable[bytes]) -> None:
    """No duplicate and no loss, with a readable diff when it fails."""
    got = collections.Counter(bodies)
    want = collections.Counter(expected)
    dupes = {b: c for b, c in got.items() if c > 1}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not dupes, f"{len(dupes)} duplicated rows, e.g. {sorted(dupes.items())[:5]}"
    assert not missing, f"{len(missing)} lost rows, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} unexpected rows, e.g. {extra[:5]}"


# -- Spark: registration, UDFs that fail once ----------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parents[2]
SUBPROCESS_TIMEOUT_S = 240.0


def register_sink(spark: Any) -> None:
    """Make ``format("sparkmq")`` writable on ``spark`` and let workers unpickle this module."""
    import sys

    from pyspark import cloudpickle

    from streaming.datasource import SparkMQDataSource

    if __name__ != "__main__":
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(SparkMQDataSource)


def fail_once(marker: str, poison: bytes) -> Any:
    """A function for a UDF: raises on the row ``poison`` the first time only (marker file)."""

    def check(body: bytes) -> bytes:
        import os as _os

        if bytes(body) == poison and not _os.path.exists(marker):
            with open(marker, "w") as out:
                out.write("failed once\n")
            raise RuntimeError(f"injected task failure on {poison!r} (test)")
        return bytes(body)

    return check


def source_bodies(count: int, start: int = 0) -> list[bytes]:
    return [b"id-%07d" % i for i in range(start, start + count)]


#: Test stores keep small files: the defaults preallocate a 1 GiB CommitLog file per store, and
#: the machine's disk is shared. The layout is recorded, so every later open adopts it.
SMALL_LAYOUT: dict[str, Any] = {
    "commitlog_file_size_bytes": 32 << 20,
    "consume_queue_units_per_file": 50_000,
    "index_hash_slots": 100_000,
    "index_max_entries": 400_000,
}


def small_config(store_dir: Path, **changes: Any) -> Any:
    return light_config(store_dir, **{"default_queues_per_topic": 8, **SMALL_LAYOUT, **changes})


def fill_source(store_dir: Path, topic: str, count: int, queues: int = 4) -> list[bytes]:
    """A fresh store with ``count`` unique bodies in ``topic``; returns them."""
    from store import MessageStore

    bodies = source_bodies(count)
    with MessageStore.open(small_config(store_dir)) as ms:
        ms.create_topic(topic, queues)
        ms.put_batch(topic, bodies)
    return bodies


# -- pipelines (run in the test's session or in a killable subprocess) -------------------------


def start_pipeline(spark: Any, spec: dict[str, Any]) -> Any:
    """Start the pipeline ``spec`` describes; returns the StreamingQuery.

    spec: ``source`` (options of the sparkmq source), ``sink`` ("sparkmq" or "parquet"),
    ``sink_options``, ``sink_select`` (SQL expressions over ``body`` and ``uniq_key``; default
    the body and the source's UNIQ_KEY as KEYS), ``checkpoint``, ``output`` (parquet dir),
    ``fail_marker`` + ``poison`` (a task fails once on that body), ``shuffle`` (repartition:
    replays may partition rows differently), ``trigger`` ("availableNow" or "processingTime"),
    ``kafka_shape`` (read with ``schema=kafka`` and write Kafka-shaped rows: ``value``, ``key``).
    """
    from pyspark.sql.functions import col, udf

    kafka_shape = spec.get("kafka_shape", False)
    reader = spark.readStream.format("sparkmq")
    for key, value in {**spec["source"], **({"schema": "kafka"} if kafka_shape else {})}.items():
        reader = reader.option(key, value)
    if kafka_shape:
        df = reader.load().selectExpr("value AS body", "CONCAT(partition, '/', offset) AS uniq_key")
    else:
        df = reader.load().select("body", "uniq_key")
    if spec.get("fail_marker"):
        check = udf(fail_once(spec["fail_marker"], spec["poison"].encode()), "binary")
        df = df.withColumn("body", check(col("body")))
    if spec.get("shuffle"):
        df = df.repartition(3)
    if spec["sink"] == "sparkmq":
        default = ("body AS value", "uniq_key AS key") if kafka_shape else ("body", "uniq_key AS keys")
        columns = spec.get("sink_select", default)
        writer = df.selectExpr(*columns).writeStream.format("sparkmq")
        for key, value in spec["sink_options"].items():
            writer = writer.option(key, value)
    else:
        writer = df.select("body").writeStream.format("parquet").option("path", spec["output"])
    writer = writer.option("checkpointLocation", spec["checkpoint"])
    if spec.get("trigger", "availableNow") == "availableNow":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="200 milliseconds")
    return writer.start()


def run_to_end(spark: Any, spec: dict[str, Any], attempts: int = 4) -> list[str]:
    """Run the pipeline until an AvailableNow run ends without error, restarting from the
    checkpoint after each failure (as an operator would); returns the failures seen."""
    from pyspark.errors import StreamingQueryException

    failures: list[str] = []
    for _ in range(attempts):
        query = start_pipeline(spark, spec)
        try:
            finished = query.awaitTermination(SUBPROCESS_TIMEOUT_S)
        except StreamingQueryException as exc:
            failures.append(str(exc)[:3000])
            continue
        assert finished, "the AvailableNow run did not finish"
        if query.exception() is None:
            return failures
        failures.append(str(query.exception())[:3000])
    raise AssertionError(f"pipeline still failing after {attempts} runs: {[f[:300] for f in failures]}")


def parquet_bodies(spark: Any, output: str) -> list[bytes]:
    return [bytes(r.body) for r in spark.read.parquet(output).collect()]


def spark_env() -> dict[str, str]:
    import os
    import sys

    env = dict(os.environ)
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = str(REPO_ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def spawn(args: list[str], log_path: Path, env: dict[str, str] | None = None) -> Any:
    """A subprocess in its own process group (so ``kill_group`` takes its JVM and workers too)."""
    import subprocess
    import sys

    log = open(log_path, "wb")  # noqa: SIM115 (closed with the process by the caller's kill_group)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.streaming.eo_helpers", *args],
        cwd=REPO_ROOT,
        env=env or spark_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_group(proc: Any) -> None:
    """kill -9 the process and everything in its group (driver JVM, Python workers)."""
    import os
    import signal

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)

    def group_gone() -> bool:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(group_gone, 60, "the killed process group to disappear")


# -- a broker in a subprocess (killable), with the sinks router -----------------------------------


def start_broker(store_dir: Path, port: int, log_path: Path, fault: str | None = None) -> Any:
    """``sparkmq serve`` + sinks router in a subprocess; ``fault`` = ``<event>:<marker>`` makes
    its sink publishing block at that event (once) until the test kills it."""
    import httpx

    args = ["broker", str(store_dir), str(port)] + ([fault] if fault else [])
    proc = spawn(args, log_path)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"broker exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 60, "the broker subprocess to answer /healthz", poll_s=0.2)
    return proc


def _broker_main(store_dir: str, port: int, fault: str | None) -> None:
    import contextlib

    from broker.config import ServerConfig
    from ingest_api.http.routers import sinks
    from ingest_api.server import build_server
    from store.publish.sink_staging import SinkStaging
    from streaming.writer import Fault

    @contextlib.asynccontextmanager
    async def fault_hook(broker: Any) -> Any:
        if fault:
            point, marker = fault.split(":", 1)
            hook = Fault(point, "block", marker)
            broker._sink_staging = SinkStaging(broker.store, on_event=hook.hit)
        yield

    config = ServerConfig(store=small_config(Path(store_dir)), port=port, log_level="warning").validate()
    server = build_server(config, companions=[fault_hook])  # the app itself resumes decided batches
    if not any(getattr(r, "path", "").startswith("/sinks") for r in server.app.routes):
        server.app.include_router(sinks.router)
    server.run()


def _query_main(spec_json: str) -> None:
    import json

    from streaming.register import local_session_builder

    spec = json.loads(spec_json)
    spark = local_session_builder("sparkmq-eo-driver").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_sink(spark)
    query = start_pipeline(spark, spec)
    query.awaitTermination(SUBPROCESS_TIMEOUT_S)


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "broker":
        _broker_main(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
    elif sys.argv[1] == "query":
        _query_main(sys.argv[2])
