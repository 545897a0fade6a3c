"""The sparkmq source on real local Spark over a topic spread over three brokers (real ZooKeeper,
brokers served from threads of the test process): every queue read at its owner, queues added
between micro-batches picked up, the group mirror committed at each queue's owner, batch reads.
Kill -9 of a broker process: test_cluster_spark_faults.py."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from store import sharding_queue
from tests.cluster.conftest import zk_url, zookeeper  # noqa: F401 (fixtures)
from tests.cluster.inprocess import InProcessCluster
from tests.streaming.cluster_helpers import ids, parquet_bodies, produce, topic_rows
from tests.streaming.eo_helpers import assert_exactly_once
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

QUERY_TIMEOUT_S = 180


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:  # noqa: F811 (fixture)
    cluster = InProcessCluster(zk_url, tmp_path / "brokers")
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def _create(trio: InProcessCluster, topic: str, queues: int) -> None:
    with trio.http("b3") as http:
        answer = http.put(f"/topics/{topic}", json={"queues": queues})
        assert answer.status_code in (200, 201), answer.text
    for name in trio.brokers:
        with trio.http(name) as http:
            wait_until(
                lambda h=http: len(h.get(f"/topics/{topic}/route").json().get("queues", [])) == queues,
                10,
                f"{name} to route {queues} queues of {topic}",
            )


def _offsets(url: str, group: str, topic: str) -> dict[str, int]:
    answer = httpx.get(f"{url}/groups/{group}/offsets", params={"topic": topic}, timeout=10)
    return dict(answer.json().get("offsets", {})) if answer.status_code == 200 else {}


def test_stream_over_three_brokers_picks_up_new_queues_and_mirrors_the_group(
    spark: Any, trio: InProcessCluster, tmp_path: Path
) -> None:
    _create(trio, "events", 6)
    first = ids(0, 3000)
    produce(trio.brokers["b2"].url, "events", first)
    output = str(tmp_path / "out")
    query = (
        spark.readStream.format("sparkmq")
        .option("endpoint", trio.brokers["b1"].url)
        .option("topic", "events")
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "1000")
        .option("group", "mirror")
        .load()
        .select("body", "queue_id")
        .writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(parquet_bodies(spark, output)) >= 3000, QUERY_TIMEOUT_S, "the first 3000 rows")
        _create(trio, "events", 9)  # grown between micro-batches: queues 6, 7, 8 on b1, b2, b3
        grown = ids(3000, 900)
        produce(trio.brokers["b3"].url, "events", grown, queue_ids=[6 + i % 3 for i in range(900)])
        keyed = ids(3900, 300)
        produce(trio.brokers["b1"].url, "events", keyed)
        wait_until(lambda: len(parquet_bodies(spark, output)) >= 4200, QUERY_TIMEOUT_S, "all 4200 rows")
        heads = {str(r["queue_id"]) for r in topic_rows(trio.brokers["b2"].url, "events")}
        assert heads == {str(q) for q in range(9)}
        expected = {str(q): n for q, n in collections.Counter(
            r["queue_id"] for r in topic_rows(trio.brokers["b2"].url, "events")
        ).items()}  # fmt: skip
        wait_until(
            lambda: _offsets(trio.brokers["b3"].url, "mirror", "events") == expected,
            60,
            "the group's offsets, committed at each owner, to reach every queue's end",
        )
        assert query.exception() is None
    finally:
        query.stop()
    rows = [(bytes(r.body), r.queue_id) for r in spark.read.parquet(output).collect()]
    assert_exactly_once([body for body, _ in rows], first + grown + keyed)
    queue_of = dict(rows)
    assert {queue_of[b] for b in grown} == {6, 7, 8}
    assert all(queue_of[b] == sharding_queue(b.decode(), 6) for b in first)
    assert all(queue_of[b] == sharding_queue(b.decode(), 9) for b in keyed)


def test_batch_read_of_a_topic_spread_over_brokers(spark: Any, trio: InProcessCluster) -> None:
    _create(trio, "stored", 5)
    bodies = ids(0, 2000)
    produce(trio.brokers["b1"].url, "stored", bodies)
    df = (
        spark.read.format("sparkmq")
        .option("endpoint", trio.brokers["b2"].url)
        .option("topic", "stored")
        .option("minPartitions", "5")
        .load()
    )
    rows = df.select("body", "queue_id", "queue_offset").collect()
    assert_exactly_once([bytes(r.body) for r in rows], bodies)
    per_queue = collections.defaultdict(list)
    for row in rows:
        per_queue[row.queue_id].append(row.queue_offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_queue.values())
