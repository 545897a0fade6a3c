"""503 when the store cannot write (disk full via the store's fault-injecting file system,
or a closed store), with nothing half-written and service resuming once the fault clears."""

from __future__ import annotations

import errno
import json

import pyarrow as pa

from store.config import FlushDiskType, StoreConfig
from store.io.fs import FaultyFileSystem
from store.message_store import MessageStore
from tests.support.waiting import wait_until

from .conftest import BrokerFactory
from .test_api_topics_produce import ARROW, error_of
from .test_batches import arrow_bytes


def test_disk_full_is_503_and_writes_nothing(broker_factory: BrokerFactory) -> None:
    fs = FaultyFileSystem()

    def open_store(config: StoreConfig) -> MessageStore:
        return MessageStore.open(config, fs=fs)

    client = broker_factory(open_store=open_store).client()
    client.put("/topics/full", json={"queues": 1})
    assert client.post("/topics/full/messages", json={"body": "before"}).status_code == 201

    fs.fail_nth("write", 1, errno.ENOSPC, persistent=True)
    single = client.post("/topics/full/messages", json={"body": "lost?"})
    assert (single.status_code, error_of(single)) == (503, "store_not_writable")
    assert single.headers["retry-after"] == "1"
    assert single.json()["retriable"] is True
    batch = client.post("/topics/full/messages:batch", json={"messages": [{"body": "x"}] * 5})
    assert batch.status_code == 503
    arrow = client.post(
        "/topics/full/messages:batch",
        content=arrow_bytes(pa.table({"body": pa.array([b"y"] * 5)})),
        headers={"content-type": ARROW},
    )
    assert arrow.status_code == 503
    assert client.get("/topics/full").json()["queue_offsets"][0]["max_offset"] == 1

    fs.heal()
    after = client.post("/topics/full/messages", json={"body": "after"})
    assert (after.status_code, after.json()["queue_offset"]) == (201, 1)
    bodies = [m["body"] for m in client.get("/topics/full/queues/0/messages").json()["messages"]]
    assert bodies == ["before", "after"]


def test_closed_store_is_503(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    client = broker.client()
    client.put("/topics/closing", json={"queues": 1})
    broker.server.app.state.broker.store.close()
    produced = client.post("/topics/closing/messages", json={"body": "x"})
    assert (produced.status_code, error_of(produced)) == (503, "store_closed")
    batch = client.post(
        "/topics/closing/messages:batch", content=json.dumps({"messages": [{"body": "x"}]}).encode()
    )
    assert batch.status_code == 503
    health = client.get("/healthz")
    assert (health.status_code, error_of(health)) == (503, "store_closed")


def test_sync_flush_201_means_flushed(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(store={"flush_disk_type": FlushDiskType.SYNC_FLUSH, "flush_interval_ms": 60_000})
    client = broker.client()
    store = broker.server.app.state.broker.store
    for request in (
        lambda: client.post("/topics/durable/messages", json={"body": "one"}),
        lambda: client.post("/topics/durable/messages:batch", json={"messages": [{"body": "two"}] * 3}),
    ):
        assert request().status_code == 201
        stats = store.stats()
        assert stats.commitlog_flushed_offset >= stats.commitlog_max_offset > 0


def test_a_failing_store_service_shows_in_healthz_and_metrics(broker_factory: BrokerFactory) -> None:
    """A periodic flush that keeps failing (its fsync) is not only logged: /healthz answers 503
    naming it and /metrics reports it down, until the disk heals."""
    fs = FaultyFileSystem()

    def open_store(config: StoreConfig) -> MessageStore:
        return MessageStore.open(config, fs=fs)

    client = broker_factory(open_store=open_store, store={"flush_interval_ms": 20}).client()
    client.put("/topics/flushy", json={"queues": 1})
    assert client.get("/healthz").status_code == 200
    fs.fail_nth("fsync", 1, errno.EIO, persistent=True)
    assert client.post("/topics/flushy/messages", json={"body": "x"}).status_code == 201
    wait_until(lambda: client.get("/healthz").status_code == 503, 10, "/healthz to report the failure")
    health = client.get("/healthz").json()
    assert health["error"] == "store_degraded"
    assert "flush-commitlog" in health["services"]
    metrics = client.get("/metrics").text
    assert 'sparkmq_store_service_up{service="flush-commitlog"} 0' in metrics
    assert 'sparkmq_store_service_up{service="index"} 1' in metrics
    fs.heal()
    wait_until(lambda: client.get("/healthz").status_code == 200, 10, "/healthz to recover")
    assert 'sparkmq_store_service_up{service="flush-commitlog"} 1' in client.get("/metrics").text
