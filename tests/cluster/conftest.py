"""A real ZooKeeper (Debian's package) on 127.0.0.1 for the cluster tests, one per session.

Each test gets its own chroot, so tests never see each other's brokers or topics."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from cluster.local_zookeeper import LocalZooKeeper
from tests.streaming.conftest import spark  # noqa: F401 (the session's SparkSession, for the Jepsen run)
from tests.support.network import free_port

_chroots = itertools.count()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"), free_port()).start()
    yield server
    server.stop()


@pytest.fixture
def zk_url(zookeeper: LocalZooKeeper) -> str:
    """A ``--cluster`` value with a chroot of its own."""
    return zookeeper.url(f"/t{next(_chroots)}")
