"""One Spark standalone cluster (a master and two workers on 127.0.0.1) for the session's cluster
tests: starting it costs ~25-50 s, so the tests share it. Marked ``spark_cluster`` (and
``slow``, ``spark``): ``make test-fast`` skips them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.spark_cluster import SparkCluster, start_cluster


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield cluster
    cluster.stop()
