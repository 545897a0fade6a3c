"""PySpark auto-registration hook: ``format("sparkmq")`` without calling ``register()``.

PySpark scans top-level modules named ``pyspark_*`` and registers their ``DefaultSource``.
"""

from streaming.datasource import SparkMQDataSource

DefaultSource = SparkMQDataSource

__all__ = ["DefaultSource"]
