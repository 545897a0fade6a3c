"""The exactly-once sink's HTTP routes across three brokers (real ZooKeeper, in-process brokers).

The driver's side is plain HTTP here (what streaming/sink_client.py sends): parts uploaded to
the coordinator, a commit, a replay. Spark and kill -9 are in test_cluster_sink_spark.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from store import sharding_queue
from store.publish import PART_SCHEMA
from streaming.cluster_backend import ClusterBackend
from tests.cluster.conftest import zk_url, zookeeper  # noqa: F401 (fixtures)
from tests.cluster.inprocess import InProcessCluster
from tests.streaming.eo_helpers import part_batch
from tests.support.waiting import wait_until

OWNERS = ["b1", "b2", "b3", "b1", "b2", "b3"]
ARROW_FILE = "application/vnd.apache.arrow.file"


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[InProcessCluster]:  # noqa: F811 (fixture)
    cluster = InProcessCluster(zk_url, tmp_path)
    for name in ("b1", "b2", "b3"):
        cluster.start(name)
    cluster.wait_converged(3)
    with cluster.http("b2") as http:
        assert http.put("/topics/out", json={"queues": len(OWNERS)}).status_code == 201
    for name in ("b1", "b2", "b3"):
        with cluster.http(name) as http:
            wait_until(lambda h=http: h.get("/topics/out/route").status_code == 200, 10, "route")
    yield cluster
    cluster.stop_all()


def _ipc_file(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, PART_SCHEMA) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _bodies(lo: int, hi: int) -> list[bytes]:
    return [b"r-%05d" % i for i in range(lo, hi)]


def _stage_and_commit(http: httpx.Client, batch_id: int, bodies: list[bytes]) -> httpx.Response:
    keys = [b.decode() if i % 3 else None for i, b in enumerate(bodies)]
    payload = _ipc_file(part_batch(bodies, sharding_keys=keys))
    staged = http.put(
        f"/sinks/s1/batches/{batch_id}/parts/p0-{batch_id}",
        content=payload,
        headers={"content-type": ARROW_FILE},
    )
    assert staged.status_code == 201, staged.text
    return http.post(
        f"/sinks/s1/batches/{batch_id}:commit",
        json={"parts": [{"part_id": f"p0-{batch_id}", "rows": len(bodies)}]},
    )


def _stored(trio: InProcessCluster) -> list[tuple[bytes, int, str]]:
    """(body, queue, uniq key) of every row of ``out``, read at each queue's owner."""
    backend = ClusterBackend(trio.brokers["b1"].url, timeout_s=10)
    rows = []
    for queue_id, (low, high) in sorted(backend.queue_heads("out").items()):
        chunk = backend.read_range("out", queue_id, offset=low, end_offset=high, max_messages=high, tags="*")
        rows += [(bytes(r["body"]), r["queue_id"], r["uniq_key"]) for r in chunk.batch.to_pylist()]
    return rows


def test_a_batch_committed_at_one_broker_is_stored_by_the_owners(trio: InProcessCluster) -> None:
    bodies = _bodies(0, 300)
    with trio.http("b1") as http:
        answer = _stage_and_commit(http, 0, bodies)
        assert answer.status_code == 200, answer.text
        assert answer.json()["rows"] == 300
        assert http.get("/sinks/s1").json() == {"sink_id": "s1", "last_published_batch": 0, "pending": []}
        replay = _stage_and_commit(http, 0, list(reversed(bodies)))
        assert replay.json()["already_published"]
    stored = _stored(trio)
    assert sorted(body for body, _, _ in stored) == bodies, "every row exactly once"
    assert len({uniq for _, _, uniq in stored}) == len(stored)
    for body, queue, _ in stored:
        if int(body[-5:]) % 3:
            assert queue == sharding_queue(body.decode(), len(OWNERS))
    with trio.http("b2") as http:  # b2 stored its queues' rows itself
        local = http.get("/topics/out/queues/1/messages", params={"offset": 0, "max_messages": 1000})
        assert local.status_code == 200
        assert {m["queue_id"] for m in local.json()["messages"]} == {1}


def test_an_owner_down_refuses_the_decision_naming_it(trio: InProcessCluster) -> None:
    trio.stop("b3")
    trio.wait_converged(2)
    with trio.http("b1") as http:
        answer = _stage_and_commit(http, 0, _bodies(0, 60))
        assert answer.status_code == 503, answer.text
        assert answer.json()["broker"] == "b3"
        assert http.get("/sinks/s1").json()["pending"] == [], "nothing decided"


def test_the_chunk_route_is_for_brokers_only(trio: InProcessCluster) -> None:
    rows = pa.Table.from_batches([part_batch([b"x"], queue_ids=[1])])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    payload = sink.getvalue().to_pybytes()
    with trio.http("b2") as http:
        plain = http.put("/sinks/s1/batches/0/chunks/0", content=payload)
        assert (plain.status_code, plain.json()["error"]) == (400, "not_forwarded")
    with trio.http("b1") as http:
        misdirected = http.put(
            "/sinks/s1/batches/0/chunks/0", content=payload, headers={"x-sparkmq-forwarded": "b3"}
        )
        assert (misdirected.status_code, misdirected.json()["error"]) == (421, "misdirected")
    with trio.http("b2") as http:
        stored = http.put(
            "/sinks/s1/batches/0/chunks/0", content=payload, headers={"x-sparkmq-forwarded": "b3"}
        )
        assert stored.json() == {"seq": 0, "rows": 1, "stored_before": 0}
        again = http.put(
            "/sinks/s1/batches/0/chunks/0", content=payload, headers={"x-sparkmq-forwarded": "b3"}
        )
        assert again.json() == {"seq": 0, "rows": 1, "stored_before": 1}
