"""End-to-end exactly-once: faults at every step, then a restart from the same checkpoint.

Pipelines: sparkmq -> sparkmq (our sink) and sparkmq -> Parquet (Spark's file sink, relying on
the source replaying a logged batch exactly). Every row carries a unique id; each test counts
the output and asserts no duplicate and no loss. The stream repartitions its rows, so a
replayed batch may put them in other parts than the first attempt did.

Faults: a write task failing once (UDF + marker file); an exception at each step of the sink's
commit (test-only ``_faultInjection`` option, see ``streaming.writer.Fault``); ``kill -9`` of the
driver (the query runs in a subprocess whose whole process group - driver, JVM, Python
workers - is SIGKILLed, mid-commit or mid-batch); ``kill -9`` of the broker mid-publish and
mid-stream in endpoint mode, then a restart of the broker.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from tests.streaming.eo_helpers import (
    assert_exactly_once,
    fill_source,
    kill_group,
    parquet_bodies,
    reader_bodies,
    register_sink,
    run_to_end,
    spawn,
    start_broker,
    start_pipeline,
)
from tests.support.network import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

ROWS = 3000
PER_BATCH = "1000"


@pytest.fixture(scope="module")
def sink_spark(spark: Any) -> Any:
    register_sink(spark)
    return spark


def _path_spec(tmp_path: Path, store_dir: Path, sink: str = "sparkmq", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "source": {"path": str(store_dir), "topic": "in", "startingOffsets": "earliest",
                   "maxMessagesPerTrigger": PER_BATCH},
        "sink": sink,
        "sink_options": {"path": str(store_dir), "topic": "out"},
        "checkpoint": str(tmp_path / "checkpoint"),
        "output": str(tmp_path / "parquet"),
        "shuffle": True,
    }  # fmt: skip
    spec.update(extra)
    return spec


def _staging_clean(store_dir: Path) -> bool:
    root = store_dir / "staging"
    return all(p.name == "STATE.json" for p in root.rglob("*") if p.is_file())


# -- sparkmq -> sparkmq, path mode --------------------------------------------------------------


def test_failing_write_task_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    spec = _path_spec(tmp_path, store_dir, fail_marker=str(tmp_path / "failed"), poison=bodies[1500].decode())
    failures = run_to_end(sink_spark, spec)
    assert len(failures) == 1 and "injected task failure" in failures[0]
    assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
    assert _staging_clean(store_dir)


@pytest.mark.parametrize("point", ["decided", "after-commit"])
def test_exception_in_commit_then_restart(sink_spark: Any, tmp_path: Path, point: str) -> None:
    """decided: the decision is durable, nothing published (the replay's parts lose to it);
    after-commit: published and marked, but Spark never got the answer (no commits log entry),
    so it replays an already published batch. (The steps in between - torn publish, published
    but not marked - are covered without Spark in test_sink_staging.py.)"""
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "fault"
    spec = _path_spec(tmp_path, store_dir)
    spec["sink_options"]["_faultInjection"] = f"{point}:raise:{marker}"
    failures = run_to_end(sink_spark, spec)
    assert len(failures) == 1 and f"injected fault at {point}" in failures[0]
    assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
    assert _staging_clean(store_dir)


def test_driver_kill9_mid_commit_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    """The driver dies after the decision of batch 1 is durable and before anything of it is
    published; the restarted query replays batch 1 (other parts) and the decision wins."""
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "blocked"
    spec = _path_spec(tmp_path, store_dir)
    spec["sink_options"]["_faultInjection"] = f"decided:block:{marker}"
    _run_subprocess_until(tmp_path, spec, marker.exists, "the commit to block after its decision")
    assert len(reader_bodies(store_dir, "out")) == 0, "the batch must be invisible before publishing"
    del spec["sink_options"]["_faultInjection"]
    assert run_to_end(sink_spark, spec) == []
    assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
    assert _staging_clean(store_dir)


def test_kafka_shaped_rows_driver_kill9_mid_commit_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    """The same kill with ``schema=kafka`` in and Kafka-shaped rows (``key``, ``value``) out:
    the shape is converted before staging, so the decision still publishes every row once."""
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "blocked"
    spec = _path_spec(tmp_path, store_dir, kafka_shape=True)
    spec["sink_options"]["_faultInjection"] = f"decided:block:{marker}"
    _run_subprocess_until(tmp_path, spec, marker.exists, "the commit to block after its decision")
    assert len(reader_bodies(store_dir, "out")) == 0, "the batch must be invisible before publishing"
    del spec["sink_options"]["_faultInjection"]
    assert run_to_end(sink_spark, spec) == []
    assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
    assert _staging_clean(store_dir)


def test_driver_kill9_at_a_random_moment_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    """kill -9 at a random time while batches run (any step: planning, writing, staging,
    deciding, publishing, marking, Spark's own logs); ``EO_KILL_SEED`` replays a failure."""
    seed = int(os.environ.get("EO_KILL_SEED", time.time_ns() % 1_000_000))
    delay_s = random.Random(seed).uniform(0.0, 3.0)
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    spec = _path_spec(tmp_path, store_dir)
    spec["source"]["maxMessagesPerTrigger"] = "500"
    first_batch = Path(spec["checkpoint"]) / "offsets" / "0"
    started: list[float] = []

    def moment() -> bool:
        if not started and first_batch.exists():
            started.append(time.monotonic())
        return bool(started) and time.monotonic() - started[0] >= delay_s

    _run_subprocess_until(tmp_path, spec, moment, f"{delay_s:.2f}s after batch 0 was planned")
    before = len(reader_bodies(store_dir, "out"))
    assert run_to_end(sink_spark, spec) == []
    (
        assert_exactly_once(reader_bodies(store_dir, "out"), bodies),
        f"seed {seed}, killed with {before} rows out",
    )
    assert _staging_clean(store_dir)


def _run_subprocess_until(tmp_path: Path, spec: dict[str, Any], condition: Any, what: str) -> None:
    """Run ``spec`` in a driver subprocess and kill -9 it (and its JVM/workers) once ``condition``."""
    proc = spawn(["query", json.dumps(spec)], tmp_path / "driver.log")
    try:

        def reached() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"driver exited early: {(tmp_path / 'driver.log').read_text()[-3000:]}")
            return bool(condition())

        wait_until(reached, 240, what, poll_s=0.05)
    finally:
        kill_group(proc)


# -- sparkmq -> Parquet ---------------------------------------------------------------------------


def test_parquet_failing_task_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    poison = bodies[2500].decode()
    spec = _path_spec(tmp_path, store_dir, "parquet", fail_marker=str(tmp_path / "f"), poison=poison)
    assert len(run_to_end(sink_spark, spec)) == 1
    assert_exactly_once(parquet_bodies(sink_spark, spec["output"]), bodies)


def test_parquet_driver_kill9_mid_batch_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    spec = _path_spec(tmp_path, store_dir, "parquet")
    batch_1_planned = Path(spec["checkpoint"]) / "offsets" / "1"
    _run_subprocess_until(tmp_path, spec, batch_1_planned.exists, "batch 1 to be planned")
    assert run_to_end(sink_spark, spec) == []
    assert_exactly_once(parquet_bodies(sink_spark, spec["output"]), bodies)


# -- endpoint mode: the broker dies ---------------------------------------------------------------


def test_broker_kill9_mid_publish_then_restart(sink_spark: Any, tmp_path: Path) -> None:
    """The broker is killed after the first chunk of a batch is published; the query's commit
    keeps retrying; the restarted broker resumes the decided batch; the query carries on."""
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    marker = tmp_path / "broker-blocked"
    broker = start_broker(store_dir, port, tmp_path / "broker1.log", fault=f"chunk-1:{marker}")
    spec = {
        "source": {"endpoint": endpoint, "topic": "in", "startingOffsets": "earliest",
                   "maxMessagesPerTrigger": PER_BATCH},
        "sink": "sparkmq",
        "sink_options": {"endpoint": endpoint, "topic": "out", "partMaxBytes": "4000",
                         "retryTimeoutMs": "180000"},
        "checkpoint": str(tmp_path / "checkpoint"),
        "shuffle": True,
    }  # fmt: skip
    query = start_pipeline(sink_spark, spec)
    try:
        wait_until(marker.exists, 240, "the broker to block mid-publish", poll_s=0.05)
        kill_group(broker)
        broker = start_broker(store_dir, port, tmp_path / "broker2.log")
        assert query.awaitTermination(240), "the query did not finish after the broker came back"
        assert query.exception() is None, "the sink's retries should have ridden out the restart"
    finally:
        query.stop()
        kill_group(broker)
    assert_exactly_once(reader_bodies(store_dir, "out"), bodies)
    assert _staging_clean(store_dir)


def test_broker_kill9_mid_stream_parquet(sink_spark: Any, tmp_path: Path) -> None:
    """endpoint source -> Parquet: the broker dies while the query runs; query and broker are
    restarted; the source replays what the checkpoint logged."""
    store_dir = tmp_path / "store"
    bodies = fill_source(store_dir, "in", ROWS)
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    broker = start_broker(store_dir, port, tmp_path / "broker1.log")
    spec = {
        "source": {"endpoint": endpoint, "topic": "in", "startingOffsets": "earliest",
                   "maxMessagesPerTrigger": "500", "requestTimeoutMs": "3000"},
        "sink": "parquet",
        "checkpoint": str(tmp_path / "checkpoint"),
        "output": str(tmp_path / "parquet"),
        "shuffle": True,
    }  # fmt: skip
    query = start_pipeline(sink_spark, spec)
    try:
        wait_until((Path(spec["checkpoint"]) / "offsets" / "2").exists, 240, "batch 2 to be planned")
        kill_group(broker)
        with contextlib.suppress(StreamingQueryException):  # expected: the source lost its broker
            query.awaitTermination(120)
        broker = start_broker(store_dir, port, tmp_path / "broker2.log")
        run_to_end(sink_spark, spec)
    finally:
        query.stop()
        kill_group(broker)
    assert_exactly_once(parquet_bodies(sink_spark, spec["output"]), bodies)
