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


def test_the_source_given_only_the_masters_address_reads_on_at_its_slave(spark: Any, tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1")
        with Client(pair.slave.url) as client:
            client.create_topic("t", 2)
            client.send_batch("t", [{"body": f"before-{i}"} for i in range(20)])
            query = (
                spark.readStream.format("sparkmq")
                .option("endpoint", pair.master.url)  # the only address it is given (failOnDataLoss on)
                .option("topic", "t")
                .option("startingOffsets", "earliest")
                .option("requestTimeoutMs", "5000")
                .load()
                .selectExpr("CAST(body AS STRING) AS body")
                .writeStream.format("memory")
                .queryName("failover_out")
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
            try:

                def bodies() -> list[str]:
                    assert query.exception() is None, str(query.exception())[:3000]
                    return [row.body for row in spark.table("failover_out").collect()]

                wait_until(lambda: len(bodies()) >= 20, 120, "the query to read the first 20")
                pair.master.kill()
                pair.wait_led_by(pair.slave)
                client.send_batch("t", [{"body": f"after-{i}"} for i in range(20)])
                wait_until(lambda: len(bodies()) >= 40, 120, "the query to read on at the slave")
                expected = [f"before-{i}" for i in range(20)] + [f"after-{i}" for i in range(20)]
                assert sorted(bodies()) == sorted(expected), "every message exactly once"
            finally:
                query.stop()
