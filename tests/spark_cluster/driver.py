"""A Spark driver joining the test cluster, run as a subprocess by tests/spark_cluster
(one SparkContext per process: the suite's local session lives in the pytest process).

    python -m tests.spark_cluster.driver read  MASTER ENDPOINT TOPIC CHECKPOINT
    python -m tests.spark_cluster.driver sink  MASTER ENDPOINT SOURCE TARGET CHECKPOINT

``read``: a ``readStream`` of TOPIC over HTTP, once through (AvailableNow), printing the rows'
UNIQ_KEYs as JSON. ``sink``: SOURCE copied into TARGET by the exactly-once sink, once through.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyspark.sql import SparkSession

from streaming.register import register
from tests.support.spark_cluster import EXECUTOR_MEMORY


def session(master: str) -> Any:
    spark = (
        SparkSession.builder.master(master)
        .appName("sparkmq-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def read(master: str, endpoint: str, topic: str, checkpoint: str) -> None:
    spark = session(master)
    stream = (
        spark.readStream.format("sparkmq").option("endpoint", endpoint).option("topic", topic)
        .option("startingOffsets", "earliest").load()
    )  # fmt: skip
    keys: list[str] = []

    def collect(df: Any, batch_id: int) -> None:
        keys.extend(row.uniq_key for row in df.select("uniq_key").collect())

    query = (
        stream.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    print(json.dumps({"uniq_keys": keys, "executors": spark.sparkContext.getConf().get("spark.master")}))
    spark.stop()


def sink(master: str, endpoint: str, source: str, target: str, checkpoint: str) -> None:
    spark = session(master)
    stream = (
        spark.readStream.format("sparkmq").option("endpoint", endpoint).option("topic", source)
        .option("startingOffsets", "earliest").load()
    )  # fmt: skip
    query = (
        stream.selectExpr("body", "uniq_key AS keys")
        .writeStream.format("sparkmq").option("endpoint", endpoint).option("topic", target)
        .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    print(json.dumps({"batches": len(query.recentProgress)}))
    spark.stop()


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    {"read": read, "sink": sink}[mode](*args)
