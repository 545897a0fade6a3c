"""Explicit registration of ``format("sparkmq")`` on a SparkSession.

Usually unnecessary: installing the package puts the top-level module ``pyspark_sparkmq``
on the path and PySpark registers its ``DefaultSource`` on the first Python data source lookup.
"""

from __future__ import annotations

from typing import Any

from streaming.source import SparkMQDataSource


def register(spark: Any) -> None:
    """Register :class:`SparkMQDataSource` as ``sparkmq`` on ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(SparkMQDataSource)
