"""Fixtures of the client tests: a real lone broker, and (re-used from tests/cluster) a real
ZooKeeper with a chroot per test for in-process clusters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker.config import ServerConfig
from sparkmq.client import Consumer
from tests.cluster.conftest import zk_url, zookeeper
from tests.cluster.inprocess import InProcessCluster
from tests.ingest.conftest import RunningBroker, start_broker, topic
from tests.support.stores import light_config
from tests.support.waiting import wait_until

__all__ = ["lone_broker", "read_until", "topic", "trio", "zk_url", "zookeeper"]


@pytest.fixture(scope="module")
def lone_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """One broker without --cluster (auto-create on, 4 queues by default)."""
    running = start_broker(ServerConfig(store=light_config(tmp_path_factory.mktemp("lone"))))
    yield running
    running.stop()


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:
    """Brokers b1, b2, b3 of one cluster, served from threads of this process."""
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def read_until(
    consumer: Consumer, done: Callable[[list[str]], bool], timeout_s: float, what: str
) -> list[str]:
    """Poll ``consumer`` (long-polls of 200 ms) until ``done`` holds for the texts read so far."""
    texts: list[str] = []

    def step() -> bool:
        texts.extend(m.text or "" for m in consumer.poll(wait_ms=200))
        return done(texts)

    wait_until(step, timeout_s, what)
    return texts
