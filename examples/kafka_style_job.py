"""A Structured Streaming job written against Spark's Kafka source and sink, run on sparkmq.

The job reads a topic, upper-cases each value and writes the records (key, value, headers) to a
second topic. The code is the same for both systems; only the format name and the address
change::

    # on sparkmq (sparkmq serve --port 8080; format("sparkmq") needs no package)
    python examples/kafka_style_job.py --format sparkmq --bootstrap 127.0.0.1:8080 \\
        --input orders --output orders_upper --checkpoint /tmp/ck-orders

    # on Kafka (Spark's Kafka connector)
    spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.3.0 \\
        examples/kafka_style_job.py --format kafka --bootstrap broker:9092 \\
        --input orders --output orders_upper --checkpoint /tmp/ck-orders

``.option("schema", "kafka")`` asks sparkmq for Kafka's columns (key, value, topic, partition,
offset, timestamp, timestampType, headers); Spark's Kafka source ignores options it does not
know, so the line is harmless there. Every other option means the same on both
(docs/spark_source.md, "Moving a Kafka job to sparkmq").
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def start(spark: Any, fmt: str, bootstrap: str, input_topic: str, output_topic: str, checkpoint: str) -> Any:
    """Start the job; returns the ``StreamingQuery`` (``Trigger.AvailableNow``: it drains what
    is there and stops)."""
    events = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", input_topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10000")
        .option("includeHeaders", "true")
        .option("schema", "kafka")
        .load()
    )
    upper = events.selectExpr(
        "CAST(key AS STRING)",
        "UPPER(CAST(value AS STRING)) AS value",
        "headers",
        f"'{output_topic}' AS topic",
    )
    return (
        upper.writeStream.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--format", default="sparkmq", choices=("sparkmq", "kafka"))
    parser.add_argument("--bootstrap", required=True, help="sparkmq: the broker's HTTP host:port")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("kafka-style-job").getOrCreate()
    query = start(spark, args.format, args.bootstrap, args.input, args.output, args.checkpoint)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
