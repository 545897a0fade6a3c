"""The exactly-once sink writing a topic spread over three brokers, with kill -9.

Real Spark, real ZooKeeper, real ``sparkmq serve --cluster`` processes. The pipeline reads 3,000
unique ids from a store directory (path mode: the source is not what is tested here) and writes
them with the sparkmq sink through broker b1 (the batches' coordinator) to ``out``, six queues on
b1, b2, b3. Even ids carry a sharding key (their body), odd ids none (spread over the live
queues). Faults, injected with ``SPARKMQ_TEST_SINK_FAULT`` on one broker:

* the driver killed (process group, kill -9) while b1 is publishing a batch across brokers;
* an owner (b2) killed at the first chunk it stores, then restarted;
* the coordinator (b1) killed after its third chunk is acknowledged, then restarted.

After each, the output is checked message by message (:func:`check_output`): every id exactly
once, on the broker owning its queue, keyed ids on their key's queue, UNIQ_KEYs unique in the
cluster, and the coordinator's staging collected.
A cluster -> cluster pipeline without faults (in-process brokers) is in test_cluster_source_spark.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.local_zookeeper import LocalZooKeeper
from store import sharding_queue
from tests.cluster.conftest import zookeeper  # noqa: F401 (fixture)
from tests.streaming.cluster_helpers import topic_rows
from tests.streaming.eo_helpers import (
    assert_exactly_once,
    fill_source,
    kill_group,
    register_sink,
    run_to_end,
    spawn,
    start_pipeline,
)
from tests.support.cluster import ProcessCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

ROWS = 3000
OWNERS = ("b1", "b2", "b3", "b1", "b2", "b3")
#: Even ids keep their body as sharding key; odd ids have none.
SINK_SELECT = [
    "body",
    "uniq_key AS keys",
    "CASE WHEN CAST(substring(CAST(body AS STRING), 4) AS INT) % 2 = 0 THEN CAST(body AS STRING) END "
    "AS sharding_key",
]


@pytest.fixture(scope="module")
def sink_spark(spark: Any) -> Any:
    register_sink(spark)
    return spark


def _cluster(root: Path, zk: LocalZooKeeper, faults: dict[str, str]) -> Any:
    """A context manager: b1, b2, b3 (``faults``: broker -> SPARKMQ_TEST_SINK_FAULT) and ``out``."""
    from contextlib import contextmanager

    @contextmanager
    def started() -> Iterator[ProcessCluster]:
        with ProcessCluster.started(root, [], zookeeper=zk) as cluster:
            for name in ("b1", "b2", "b3"):
                env = {"SPARKMQ_TEST_SINK_FAULT": faults[name]} if name in faults else None
                cluster.add(name, env=env, wait=False)
            for broker in cluster.brokers.values():
                broker.wait_healthy()
            cluster.wait_live(3)
            with cluster.http("b1") as http:
                assert http.put("/topics/out", json={"queues": len(OWNERS)}).status_code == 201
            for name in ("b1", "b2", "b3"):
                with cluster.http(name) as http:
                    wait_until(lambda h=http: h.get("/topics/out/route").status_code == 200, 10, "route")
            yield cluster

    return started()


def _spec(tmp_path: Path, store_dir: Path, cluster: ProcessCluster) -> dict[str, Any]:
    return {
        "source": {"path": str(store_dir), "topic": "in", "startingOffsets": "earliest",
                   "maxMessagesPerTrigger": "1000"},
        "sink": "sparkmq",
        "sink_select": SINK_SELECT,
        "sink_options": {"endpoint": cluster.brokers["b1"].url, "topic": "out", "partMaxBytes": "4000",
                         "retryTimeoutMs": "180000", "sinkId": "eo-cluster"},
        "checkpoint": str(tmp_path / "checkpoint"),
        "shuffle": True,
    }  # fmt: skip


def check_output(cluster: ProcessCluster, bodies: list[bytes]) -> None:
    rows = topic_rows(cluster.brokers["b2"].url, "out")
    seen: dict[bytes, list[tuple[int, int, str]]] = {}
    for row in rows:
        where = (row["queue_id"], row["queue_offset"], row["uniq_key"])
        seen.setdefault(bytes(row["body"]), []).append(where)
    twice = {body: places for body, places in seen.items() if len(places) > 1}
    assert not twice, f"{len(twice)} rows stored twice (queue, offset, UNIQ_KEY): {sorted(twice.items())[:5]}"
    assert_exactly_once([bytes(r["body"]) for r in rows], bodies)
    uniq = [r["uniq_key"] for r in rows]
    assert len(set(uniq)) == len(uniq), "UNIQ_KEYs are unique across the brokers"
    for row in rows:
        body = bytes(row["body"])
        if int(body[3:]) % 2 == 0:
            assert row["queue_id"] == sharding_queue(body.decode(), len(OWNERS)), body
    coordinator_staging = cluster.brokers["b1"].store_dir / "staging"
    leftovers = [p for p in coordinator_staging.rglob("*") if p.is_file() and p.name != "STATE.json"]
    assert leftovers == [], leftovers[:5]


def _per_broker(cluster: ProcessCluster) -> set[str]:
    """Which brokers hold rows of ``out`` (each queue is read at its owner)."""
    with cluster.http("b1") as http:
        topic = http.get("/topics/out").json()
    return {q["broker"] for q in topic["queue_offsets"] if q["max_offset"] > 0}


def test_driver_kill9_while_the_coordinator_publishes_across_brokers(
    sink_spark: Any,
    tmp_path: Path,
    zookeeper: LocalZooKeeper,  # noqa: F811 (fixture)
) -> None:
    store_dir = tmp_path / "source"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "paused"
    with _cluster(tmp_path / "cluster", zookeeper, {"b1": f"chunk-2:pause:{marker}"}) as cluster:
        spec = _spec(tmp_path, store_dir, cluster)
        driver = spawn(["query", json.dumps(spec)], tmp_path / "driver.log")
        try:
            wait_until(marker.exists, 240, "b1 to pause mid-publish", poll_s=0.05)
        finally:
            kill_group(driver)
        Path(f"{marker}.release").write_text("go\n")  # b1 finishes the batch nobody waits for
        assert run_to_end(sink_spark, spec) == []
        check_output(cluster, bodies)
        assert _per_broker(cluster) == {"b1", "b2", "b3"}


def test_owner_kill9_mid_publish_then_restart(
    sink_spark: Any,
    tmp_path: Path,
    zookeeper: LocalZooKeeper,  # noqa: F811 (fixture)
) -> None:
    store_dir = tmp_path / "source"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "b2-killed"
    with _cluster(tmp_path / "cluster", zookeeper, {"b2": f"stored-*:kill:{marker}"}) as cluster:
        spec = _spec(tmp_path, store_dir, cluster)
        query = start_pipeline(sink_spark, spec)
        try:
            wait_until(marker.exists, 240, "b2 to die storing its first chunk", poll_s=0.05)
            wait_until(lambda: not cluster.brokers["b2"].alive, 30, "b2's process to be gone")
            cluster.restart("b2")
            assert query.awaitTermination(240), "the query did not finish after b2 came back"
            assert query.exception() is None, "the sink's retries should have ridden out the restart"
        finally:
            query.stop()
        check_output(cluster, bodies)


def test_coordinator_kill9_mid_publish_then_restart(
    sink_spark: Any,
    tmp_path: Path,
    zookeeper: LocalZooKeeper,  # noqa: F811 (fixture)
) -> None:
    store_dir = tmp_path / "source"
    bodies = fill_source(store_dir, "in", ROWS)
    marker = tmp_path / "b1-killed"
    with _cluster(tmp_path / "cluster", zookeeper, {"b1": f"chunk-3:kill:{marker}"}) as cluster:
        spec = _spec(tmp_path, store_dir, cluster)
        query = start_pipeline(sink_spark, spec)
        try:
            wait_until(marker.exists, 240, "b1 to die mid-publish", poll_s=0.05)
            wait_until(lambda: not cluster.brokers["b1"].alive, 30, "b1's process to be gone")
            cluster.restart("b1")
            assert query.awaitTermination(240), "the query did not finish after b1 came back"
            assert query.exception() is None, "the sink's retries should have ridden out the restart"
        finally:
            query.stop()
        check_output(cluster, bodies)
