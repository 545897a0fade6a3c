"""One local SparkSession for the whole Spark suite (``local[2]``, UI off, RocksDB state store).

Spark tests are marked ``@pytest.mark.spark``. Starting the JVM costs ~5 s and the first
Python data source query another ~4 s, so the session is shared; every test uses its own
checkpoint directory and its own store directory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.config import ServerConfig
from ingest_api.server import build_server
from store import Message, MessageStore, StoreConfig
from streaming.register import local_session_builder
from tests.support.network import free_port
from tests.support.waiting import wait_until

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        local_session_builder("sparkmq-tests")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.checkpointLocation", str(tmp_path_factory.mktemp("checkpoints")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")


def open_store(store_dir: Path, **changes: Any) -> Any:
    """A real MessageStore on ``store_dir`` (background services on: delay delivery, flush)."""
    config = StoreConfig(store_dir=store_dir, **changes).validate()
    return MessageStore.open(config)


def produce(
    store: Any, topic: str, count: int, *, queues: int = 4, tags: Any = None, start: int = 0
) -> list[Any]:
    """``count`` messages spread round-robin over ``queues`` queues; body ``b"msg-<i>"``."""
    if not store.has_topic(topic):
        store.create_topic(topic, queues)
    messages = [
        Message(
            topic=topic,
            body=f"msg-{i}".encode(),
            queue_id=i % queues,
            tags=tags(i) if callable(tags) else tags,
            keys=(f"k{i}",),
        )
        for i in range(start, start + count)
    ]
    return list(store.put_messages(messages))


class Broker:
    """``sparkmq serve`` in a background thread on a free 127.0.0.1 port."""

    def __init__(
        self, store_dir: Path, auth_file: Path | None = None, port: int | None = None, **changes: Any
    ) -> None:
        port = port or free_port()
        store_config = StoreConfig(store_dir=store_dir, **changes).validate()
        config = ServerConfig(
            store=store_config, port=port, log_level="warning", auth_file=auth_file
        ).validate()
        self.url = f"http://127.0.0.1:{port}"
        self.server = build_server(config)
        self.thread = threading.Thread(target=self.server.run, name="sparkmq-broker", daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), 30, "the broker to start")
        if not self.server.started:
            raise RuntimeError(f"the broker on {store_dir} failed to start (see its log above)")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def broker_factory() -> Iterator[Callable[..., Broker]]:
    started: list[Broker] = []

    def start(store_dir: Path, **changes: Any) -> Broker:
        broker = Broker(store_dir, **changes)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()
