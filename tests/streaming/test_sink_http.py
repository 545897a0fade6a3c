"""The broker's ``/sinks`` routes without Spark (in-process app, real store): stage, commit,
replay, abort, errors, and publishing resumed by the app's start after a crash."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from ingest_api.app import create_app
from store import MessageStore
from store.publish.sink_parts import COMMIT_FILE, StagedPart, batch_dir
from store.publish.sink_staging import SinkStaging
from tests.streaming.eo_helpers import assert_exactly_once, part_batch, small_config, topic_bodies

SINK = "q-http"
ARROW_FILE = {"content-type": "application/vnd.apache.arrow.file"}


def _ipc_file(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def _bodies(lo: int, hi: int) -> list[bytes]:
    return [b"h-%05d" % i for i in range(lo, hi)]


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def client(store_dir: Path) -> Iterator[TestClient]:
    with TestClient(create_app(small_config(store_dir))) as http:
        yield http


def _put(client: TestClient, batch_id: int, part_id: str, bodies: list[bytes]) -> Any:
    return client.put(
        f"/sinks/{SINK}/batches/{batch_id}/parts/{part_id}",
        content=_ipc_file(part_batch(bodies)),
        headers=ARROW_FILE,
    )


def test_stage_commit_replay_abort(client: TestClient, store_dir: Path) -> None:
    assert _put(client, 0, "p0", _bodies(0, 10)).json() == {"part_id": "p0", "rows": 10}
    assert _put(client, 0, "p1", _bodies(10, 15)).status_code == 201
    assert _put(client, 0, "p1", _bodies(10, 15)).status_code == 201, "re-uploading a part is idempotent"
    parts = [{"part_id": "p0", "rows": 10}, {"part_id": "p1", "rows": 5}]
    first = client.post(f"/sinks/{SINK}/batches/0:commit", json={"parts": parts}).json()
    assert (first["rows"], first["decided_now"], first["already_published"]) == (15, True, False)
    again = client.post(f"/sinks/{SINK}/batches/0:commit", json={"parts": parts}).json()
    assert again["already_published"]
    assert client.get(f"/sinks/{SINK}").json() == {"sink_id": SINK, "last_published_batch": 0, "pending": []}

    assert _put(client, 1, "orphan", _bodies(90, 95)).status_code == 201
    assert client.post(f"/sinks/{SINK}/batches/1:abort", json={"part_ids": ["orphan"]}).json() == {
        "removed": 1
    }
    missing = client.post(
        f"/sinks/{SINK}/batches/1:commit", json={"parts": [{"part_id": "orphan", "rows": 5}]}
    )
    assert missing.status_code == 409 and "missing" in missing.json()["message"]

    bad = client.put(f"/sinks/{SINK}/batches/1/parts/x", content=b"not arrow", headers=ARROW_FILE)
    assert bad.status_code == 400
    wrong_schema = client.put(
        f"/sinks/{SINK}/batches/1/parts/x",
        content=_ipc_file(pa.record_batch({"body": [b"a"]})),
        headers=ARROW_FILE,
    )
    assert wrong_schema.status_code == 400 and "schema" in wrong_schema.json()["message"]
    assert client.put(
        f"/sinks/{SINK}/batches/1/parts/..%2F..", content=b"", headers=ARROW_FILE
    ).status_code in (
        404,
        422,
    )
    assert_exactly_once(_published(client), _bodies(0, 15))


def _published(client: TestClient) -> list[bytes]:
    store = client.app.state.broker.store  # type: ignore[attr-defined]
    return topic_bodies(store, "out")


def test_broker_start_resumes_a_decided_batch(store_dir: Path) -> None:
    """A batch decided but not published when the broker died is published by the next start."""
    store = MessageStore.open(small_config(store_dir, background_services=False))
    staging = SinkStaging(store)
    staged = [staging.stage_part(SINK, 4, "a", _ipc_file(part_batch(_bodies(0, 20))))]
    staging._publish = lambda manifest, resume, **_: None  # type: ignore[method-assign]
    staging._mark_published = lambda sink, batch: None  # type: ignore[method-assign]
    staging.commit(SINK, 4, [StagedPart(p.part_id, p.rows) for p in staged])
    assert (batch_dir(staging.root, SINK, 4) / COMMIT_FILE).exists()
    store.abandon()  # kill -9

    with TestClient(create_app(small_config(store_dir))) as client:
        assert client.get(f"/sinks/{SINK}").json()["last_published_batch"] == 4
        assert_exactly_once(_published(client), _bodies(0, 20))
        replay = client.post(f"/sinks/{SINK}/batches/4:commit", json={"parts": []}).json()
        assert replay["already_published"]
