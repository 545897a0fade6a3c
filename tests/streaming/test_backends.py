"""One contract, three backends: the store directory (PathBackend), the broker (EndpointBackend)
and the cluster reached through a broker (ClusterBackend; here a lone broker, a cluster of one:
tests/streaming/test_cluster_backend.py has three).

No Spark here: these pin down that the data planes answer every question identically.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from store.format.arrow_schema import MESSAGE_SCHEMA
from store.types import GetStatus
from streaming.backends import Backend, BackendError, EndpointBackend, PathBackend
from streaming.cluster_backend import ClusterBackend
from streaming.offsets import QueueRange
from streaming.options import parse_options
from streaming.reader import read_ranges
from tests.store.test_reader_pages import mapped_rss_kb
from tests.streaming.conftest import Broker, open_store, produce
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def served_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Broker, list[Any]]]:
    store_dir = tmp_path_factory.mktemp("backends") / "store"
    kinds = ["paid", "refunded", None]
    with open_store(store_dir) as store:
        results = produce(store, "orders", 30, queues=3, tags=lambda i: kinds[(i // 3) % 3])
        wait_until(
            lambda: time.time_ns() // 1_000_000 > results[-1].store_timestamp_ms, 5, "clock", poll_s=0.002
        )
        results += produce(store, "orders", 30, queues=3, tags=lambda i: kinds[(i // 3) % 3], start=30)
    broker = Broker(store_dir)
    yield store_dir, broker, results
    broker.stop()


@pytest.fixture(params=["path", "endpoint", "cluster"])
def backend(request: pytest.FixtureRequest, served_store: tuple[Path, Broker, list[Any]]) -> Backend:
    store_dir, broker, _ = served_store
    if request.param == "path":
        return PathBackend(str(store_dir))
    if request.param == "cluster":
        return ClusterBackend(broker.url, timeout_s=30)
    return EndpointBackend(broker.url, timeout_s=30)


def test_queue_heads(backend: Backend) -> None:
    assert backend.queue_heads("orders") == {0: (0, 20), 1: (0, 20), 2: (0, 20)}
    assert backend.queue_heads("missing") == {}


def test_topics_lists_user_topics_only(backend: Backend) -> None:
    # the store holds system topics too (SCHEDULE_TOPIC_XXXX, ...): never listed
    assert backend.topics() == ["orders"]


def test_offset_for_timestamp(backend: Backend, served_store: tuple[Path, Broker, list[Any]]) -> None:
    results = served_store[2]
    second_half = min(r.store_timestamp_ms for r in results[30:])
    assert backend.offset_for_timestamp("orders", 0, second_half) == 10
    assert backend.offset_for_timestamp("orders", 0, 0) == 0
    assert backend.offset_for_timestamp("orders", 0, 2**53) == 20


def test_read_range_stops_at_the_planned_end_and_filters_tags(backend: Backend) -> None:
    chunk = backend.read_range("orders", 1, offset=2, end_offset=7, max_messages=100, tags="*")
    assert chunk.status is GetStatus.FOUND
    assert chunk.next_offset == 7
    assert chunk.batch.schema.equals(MESSAGE_SCHEMA)
    assert chunk.batch.column("queue_offset").to_pylist() == [2, 3, 4, 5, 6]
    paid = backend.read_range("orders", 1, offset=0, end_offset=20, max_messages=100, tags="paid")
    assert set(paid.batch.column("tags").to_pylist()) == {"paid"}
    assert paid.next_offset == 20


def test_both_backends_return_identical_rows(served_store: tuple[Path, Broker, list[Any]]) -> None:
    store_dir, broker, _ = served_store
    path = PathBackend(str(store_dir))
    endpoint = EndpointBackend(broker.url, timeout_s=30)
    for queue_id in range(3):
        a = path.read_range("orders", queue_id, offset=0, end_offset=20, max_messages=20, tags="*").batch
        b = endpoint.read_range("orders", queue_id, offset=0, end_offset=20, max_messages=20, tags="*").batch
        assert pa.Table.from_batches([a]).equals(pa.Table.from_batches([b]))


def test_endpoint_backend_sends_its_bearer_token(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(
        json.dumps({"tokens": [{"name": "spark", "token": "spark-s3cret", "consume": ["orders"]}]})
    )
    broker = Broker(store_dir, auth_file=auth_file)
    try:
        with pytest.raises(BackendError, match="HTTP 401"):
            EndpointBackend(broker.url, timeout_s=30).queue_heads("orders")
        authorised = EndpointBackend(broker.url, timeout_s=30, auth_token="spark-s3cret")
        assert authorised.queue_heads("orders") == {0: (0, 2), 1: (0, 2)}
        chunk = authorised.read_range("orders", 0, offset=0, end_offset=2, max_messages=10, tags="*")
        assert chunk.batch.num_rows == 2
    finally:
        broker.stop()


def test_endpoint_pulls_survive_a_broker_restart_on_the_same_port(tmp_path: Path) -> None:
    """Arrow pulls keep a connection per thread; when the broker goes away and comes back (same
    port), the next pull reconnects instead of failing, and a pull while it is down is a
    BackendError (the source's retry policy decides)."""
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 6, queues=1)
    broker = Broker(store_dir)
    port = int(broker.url.rsplit(":", 1)[1])
    backend = EndpointBackend(broker.url, timeout_s=10)
    first = backend.read_range("orders", 0, offset=0, end_offset=6, max_messages=3, tags="*")
    assert first.batch.column("body").to_pylist() == [b"msg-0", b"msg-1", b"msg-2"]
    broker.stop()
    with pytest.raises(BackendError):
        backend.read_range("orders", 0, offset=3, end_offset=6, max_messages=3, tags="*")
    again = Broker(store_dir, port=port)
    try:
        rest = backend.read_range("orders", 0, offset=3, end_offset=6, max_messages=3, tags="*")
        assert rest.batch.column("body").to_pylist() == [b"msg-3", b"msg-4", b"msg-5"]
        assert rest.next_offset == 6
    finally:
        again.stop()


def test_a_path_task_leaves_no_store_page_mapped_in_its_worker(
    served_store: tuple[Path, Broker, list[Any]],
) -> None:
    """Spark keeps the worker (and its StoreReader) between batches: a task's reads give back
    the CommitLog and ConsumeQueue pages they mapped when the task ends."""
    store_dir, _, _ = served_store
    options = parse_options({"path": str(store_dir), "topics": "orders"})
    ranges = [QueueRange("orders", queue, 0, 20) for queue in range(3)]
    resident = []

    def rows() -> Iterator[pa.RecordBatch]:
        for batch in read_ranges(options, ranges):
            resident.append(mapped_rss_kb(store_dir.resolve()))  # while the task reads
            yield batch

    assert sum(batch.num_rows for batch in rows()) == 60
    assert max(resident) > 0
    assert mapped_rss_kb(store_dir.resolve()) == 0
    for backend in (
        EndpointBackend("http://127.0.0.1:1", timeout_s=1),
        ClusterBackend("http://127.0.0.1:1", timeout_s=1),
    ):
        backend.release_pages()  # nothing mapped: reads come over HTTP
