"""Explicit registration of ``format("sparkmq")`` on a SparkSession.

Usually unnecessary: installing the package puts the top-level module ``pyspark_sparkmq``
on the path and PySpark registers its ``DefaultSource`` on the first Python data source lookup.
"""

from __future__ import annotations

from typing import Any

from streaming.datasource import SparkMQDataSource


def register(spark: Any) -> None:
    """Register :class:`SparkMQDataSource` as ``sparkmq`` on ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(SparkMQDataSource)


def local_session_builder(app_name: str, cores: int = 2) -> Any:
    """A ``SparkSession.Builder`` for a local Spark on this machine, as sparkmq's tests and
    benchmarks use it: ``local[cores]``, ``cores`` shuffle partitions, no UI, the driver bound to
    127.0.0.1, Python workers on this interpreter. Add any other ``.config`` and call
    ``getOrCreate()``; ``format("sparkmq")`` needs nothing more."""
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
    )
