"""The Spark source in endpoint mode, given only a replica group's master, follows the group to
its slave when the master is killed: real broker processes, a real ZooKeeper, local Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkmq.client import Client
from tests.support.cluster import ProcessCluster
from tests.support.replica_pair import ReplicaPair
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.spark]


#: A loaded machine's known Spark flake: the query is restarted from its checkpoint on it.
WORKER_START_FLAKE = "Python worker failed to connect back"


class Query:
    """The query under test: endpoint mode given ``endpoint`` only, failOnDataLoss on, a Parquet
    sink (exactly once across restarts from the checkpoint)."""

    def __init__(self, spark: Any, endpoint: str, root: Path) -> None:
        self.spark, self.endpoint = spark, endpoint
        self.output, self.checkpoint = str(root / "out"), str(root / "checkpoint")
        self.query = self._start()

    def _start(self) -> Any:
        return (
            self.spark.readStream.format("sparkmq")
            .option("endpoint", self.endpoint)
            .option("topic", "t")
            .option("startingOffsets", "earliest")
            .option("requestTimeoutMs", "5000")
            .load()
            .selectExpr("CAST(body AS STRING) AS body")
            .writeStream.format("parquet")
            .option("path", self.output)
            .option("checkpointLocation", self.checkpoint)
            .trigger(processingTime="500 milliseconds")
            .start()
        )

    def bodies(self) -> list[str]:
        error = self.query.exception()
        if error is not None:
            assert WORKER_START_FLAKE in str(error), str(error)[:3000]
            self.query.stop()
            self.query = self._start()
        try:
            return [row.body for row in self.spark.read.parquet(self.output).collect()]
        except Exception:
            return []

    def stop(self) -> None:
        self.query.stop()


def test_the_source_given_only_the_masters_address_reads_on_at_its_slave(spark: Any, tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1")
        with Client(pair.slave.url) as client:
            client.create_topic("t", 2)
            client.send_batch("t", [{"body": f"before-{i}"} for i in range(20)])
            query = Query(spark, pair.master.url, tmp_path)  # the only address it is given
            try:
                wait_until(lambda: len(query.bodies()) >= 20, 120, "the query to read the first 20")
                pair.master.kill()
                pair.wait_led_by(pair.slave)
                client.send_batch("t", [{"body": f"after-{i}"} for i in range(20)])
                wait_until(lambda: len(query.bodies()) >= 40, 120, "the query to read on at the slave")
                expected = [f"before-{i}" for i in range(20)] + [f"after-{i}" for i in range(20)]
                assert sorted(query.bodies()) == sorted(expected), "every message exactly once"
            finally:
                query.stop()
