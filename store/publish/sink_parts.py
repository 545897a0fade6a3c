"""The sink's staging area on disk: where parts, decisions and state live, and their formats.

No store is needed here: Spark executors in ``path`` mode write their parts directly, and the
broker reads them back when it publishes (:mod:`store.publish.sink_staging` has the protocol)::

    {store}/staging/{sink_id}/STATE.json                    {"last_published_batch": b}
    {store}/staging/{sink_id}/{batch_id:020d}/part-*.arrow  staged rows (PART_SCHEMA, Arrow IPC file)
    {store}/staging/{sink_id}/{batch_id:020d}/COMMIT.json   the decision: the parts, in order

Every file is written atomically (:mod:`store.io.atomic_file`).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from store.errors import InvalidArgument, StoreError
from store.io.atomic_file import write_atomically
from store.io.file_names import offset_to_file_name
from store.names import ID_PATTERN

STAGING_DIR_NAME = "staging"
STATE_FILE = "STATE.json"
COMMIT_FILE = "COMMIT.json"
PART_PREFIX, PART_SUFFIX = "part-", ".arrow"
#: Rows per ``put_batch`` call when publishing (recorded in each manifest: sequences depend on it).
DEFAULT_CHUNK_ROWS = 65_536
#: Sink ids and part ids become file names.
_ID_PATTERN = re.compile(f"^{ID_PATTERN}$")

#: What a staged part holds: one row per message, already resolved (topic filled in, keys joined
#: with spaces as RocketMQ's KEYS property). ``queue_id`` wins over ``sharding_key``; both null
#: lets the store go round robin.
PART_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("body", pa.binary(), nullable=False),
        pa.field("tags", pa.string()),
        pa.field("keys", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("queue_id", pa.int32()),
        pa.field("sharding_key", pa.string()),
        pa.field("delay_level", pa.int32()),
    ]
)


class SinkStagingError(StoreError):
    """A sink commit cannot proceed (unknown or damaged staged part, bad id)."""

    code = "sink_staging_error"


class OwnerUnavailable(StoreError):
    """A broker that owns queues of a batch is down or does not answer (cluster mode).

    Before the decision nothing is decided; after it the decision stands and the next commit
    (or the coordinator's recovery) resumes once the broker is back."""

    code = "queue_unavailable"
    retriable = True

    def __init__(self, message: str, *, broker: str) -> None:
        super().__init__(message)
        self.broker = broker


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A target topic's route as a decision records it (cluster mode).

    ``owners[q]`` is the broker name owning queue ``q``; ``spread`` the queues that rows with
    neither ``queue_id`` nor ``sharding_key`` are spread over (those whose owner was alive)."""

    owners: tuple[str, ...]
    spread: tuple[int, ...]

    @staticmethod
    def of(owners: Sequence[str], live: Iterable[str]) -> TopicRoute:
        alive = set(live)
        return TopicRoute(tuple(owners), tuple(q for q, owner in enumerate(owners) if owner in alive))

    def to_json(self) -> dict[str, object]:
        return {"owners": list(self.owners), "spread": list(self.spread)}

    @staticmethod
    def from_json(doc: dict[str, object]) -> TopicRoute:
        owners = doc["owners"]
        spread = doc["spread"]
        if not isinstance(owners, list) or not isinstance(spread, list):
            raise SinkStagingError(f"a decision's route must hold lists, got {doc!r}")
        return TopicRoute(tuple(str(o) for o in owners), tuple(int(q) for q in spread))


@dataclass(frozen=True, slots=True)
class StagedPart:
    """One staged file of one write task (what a WriterCommitMessage names)."""

    part_id: str
    rows: int


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What ``commit`` did. ``decided_now`` is False for a replay that found an earlier decision."""

    sink_id: str
    batch_id: int
    rows: int
    already_published: bool = False
    decided_now: bool = True


# -- layout and part files (no store needed: executors write parts in path mode) ---------------


def staging_root(store_dir: Path | str) -> Path:
    return Path(store_dir) / STAGING_DIR_NAME


def check_id(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _ID_PATTERN.match(value):
        raise InvalidArgument(f"{kind} {value!r} must be 1-128 characters of [A-Za-z0-9_.-]")
    return value


def batch_dir(root: Path, sink_id: str, batch_id: int) -> Path:
    if batch_id < 0:
        raise InvalidArgument(f"batch id must be >= 0, got {batch_id}")
    return root / check_id("sink id", sink_id) / offset_to_file_name(batch_id)


def part_path(root: Path, sink_id: str, batch_id: int, part_id: str) -> Path:
    return batch_dir(root, sink_id, batch_id) / f"{PART_PREFIX}{check_id('part id', part_id)}{PART_SUFFIX}"


def new_part_id(partition_id: int, attempt: int, index: int = 0) -> str:
    """Unique per task attempt and file: ``p<partition>-a<attempt>-<index>-<random>``."""
    return f"p{partition_id:05d}-a{attempt}-{index}-{uuid.uuid4().hex[:12]}"


def write_part(path: Path, batches: Iterable[pa.RecordBatch]) -> int:
    """Write ``batches`` (in :data:`PART_SCHEMA`) as an Arrow IPC file, atomically; returns rows."""
    rows = 0

    def fill(temp: Path) -> None:
        nonlocal rows
        with pa.OSFile(str(temp), "wb") as sink, pa.ipc.new_file(sink, PART_SCHEMA) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows

    write_atomically(path, fill)
    return rows


def write_part_bytes(path: Path, payload: bytes) -> int:
    """Store an uploaded Arrow IPC file after checking its schema; returns its rows."""
    try:
        reader = pa.ipc.open_file(pa.BufferReader(payload))
        table = reader.read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InvalidArgument(f"staged part is not an Arrow IPC file: {exc}") from exc
    _check_part_schema(table.schema, path.name)
    return write_part(path, table.to_batches())


def read_part(path: Path) -> pa.Table:
    """A staged part (memory-mapped, zero-copy)."""
    try:
        with pa.memory_map(str(path), "r") as source:
            table = pa.ipc.open_file(source).read_all()
    except FileNotFoundError as exc:
        raise SinkStagingError(f"staged part {path} is missing") from exc
    except (pa.ArrowInvalid, OSError) as exc:
        raise SinkStagingError(f"staged part {path} is damaged: {exc}") from exc
    _check_part_schema(table.schema, str(path))
    return table


def _check_part_schema(schema: pa.Schema, where: str) -> None:
    if not schema.equals(PART_SCHEMA):
        raise InvalidArgument(f"staged part {where}: schema {schema} is not the sink part schema")


@dataclass(frozen=True, slots=True)
class Manifest:
    """The decision of one batch (``COMMIT.json``)::

        {"sink_id": "s", "batch_id": 3, "chunk_rows": 65536,
         "parts": [{"part_id": "p00000-a0-0-...", "rows": 10}, ...],
         "routes": {"out": {"owners": ["b1", "b2"], "spread": [0, 1]}}}

    ``routes`` is present only when the batch was decided across brokers (a cluster): it fixes
    every row's queue (:mod:`store.publish.sink_plan`); without it the store picks queues as on
    a lone broker. Golden bytes in ``tests/streaming/test_sink_plan.py``."""

    sink_id: str
    batch_id: int
    parts: tuple[StagedPart, ...]
    chunk_rows: int
    routes: Mapping[str, TopicRoute] | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    def to_json(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "sink_id": self.sink_id,
            "batch_id": self.batch_id,
            "chunk_rows": self.chunk_rows,
            "parts": [{"part_id": p.part_id, "rows": p.rows} for p in self.parts],
        }
        if self.routes is not None:
            doc["routes"] = {topic: self.routes[topic].to_json() for topic in sorted(self.routes)}
        return doc

    @staticmethod
    def load(path: Path) -> Manifest:
        return Manifest.from_json(json.loads(path.read_text(encoding="utf-8")))

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Manifest:
        routes = doc.get("routes")
        return Manifest(
            sink_id=str(doc["sink_id"]),
            batch_id=int(doc["batch_id"]),
            parts=tuple(StagedPart(str(p["part_id"]), int(p["rows"])) for p in doc["parts"]),
            chunk_rows=int(doc["chunk_rows"]),
            routes=None
            if routes is None
            else {str(topic): TopicRoute.from_json(route) for topic, route in routes.items()},
        )
