"""``writeStream.format("sparkmq")`` / ``df.write.format("sparkmq")``: the exactly-once sink.

A thin adapter over PySpark's writer contract and :mod:`store.publish.sink_staging` (design, failure
matrix and what readers observe: docs/exactly_once.md):

* ``write()`` (executors, Arrow batches in) converts its rows to staged parts: files under
  ``<store>/staging/<sink>/<batch>/`` in ``path`` mode, ``PUT /sinks/{sink}/batches/{batch}/parts/{part}``
  in ``endpoint`` mode. Nothing is visible to readers. It returns a :class:`SinkCommitMessage`
  naming the parts and their row counts.
* ``commit(messages, batchId)`` (driver, a fresh writer per call) hands the part list to
  :meth:`store.publish.sink_staging.SinkStaging.commit`: in ``path`` mode by opening the store
  directory itself (it must not be owned by a broker), in ``endpoint`` mode with
  ``POST /sinks/{sink}/batches/{batch}:commit``. The first decision for a (sink, batch) wins,
  publishing is idempotent, so a replay after any crash writes nothing twice.
* ``abort`` deletes the parts of the failed attempt (best effort; orphans are also collected
  by the next commit).

The sink id is the option ``sinkId`` or else the streaming query id, read on the executors from
the task's local property ``sql.streaming.queryId``: it is stored in the checkpoint, so it is
the same after a restart and new for a new checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from store import MessageStore, SparkMQError, StoreLocked
from store.publish import (
    PART_SCHEMA,
    SinkStaging,
    StagedPart,
    new_part_id,
    part_path,
    staging_root,
    write_part,
)
from streaming.bootstrap import bootstrap_problem
from streaming.kafka_options import BOOTSTRAP_SERVERS
from streaming.sink_client import SinkClient
from streaming.sink_columns import (
    InvalidSinkOption,
    SinkOptions,
    check_input_schema,
    parse_sink_options,
    part_batch,
)

log = logging.getLogger(__name__)

#: Local properties Spark sets on every task of a micro-batch (StreamExecution.QUERY_ID_KEY /
#: MicroBatchExecution.BATCH_ID_KEY; internal but stable since Spark 2).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Path mode: how long a commit waits for another short-lived owner of the store directory.
LOCK_WAIT_S = 10.0


class SinkError(SparkMQError):
    """The sink cannot stage or commit (store owned by a broker, inconsistent messages...)."""

    code = "sink_error"


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one successful write task staged (picklable: primitives only)."""

    sink_id: str
    batch_id: int
    partition_id: int
    attempt: int
    #: ``(part_id, rows)`` in write order.
    parts: tuple[tuple[str, int], ...]

    @property
    def rows(self) -> int:
        return sum(rows for _, rows in self.parts)


def stream_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> SparkMQStreamWriter:
    """``DataSource.streamWriter``: validates options and columns (fails the query at start)."""
    return SparkMQStreamWriter(_checked(options, schema, overwrite))


def batch_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> SparkMQBatchWriter:
    """``DataSource.writer`` for ``df.write.format("sparkmq")`` (append only)."""
    parsed = _checked(options, schema, overwrite)
    return SparkMQBatchWriter(parsed, parsed.sink_id or f"write-{uuid.uuid4().hex}", parsed.batch_id or 0)


def _checked(options: dict[str, str], schema: StructType, overwrite: bool) -> SinkOptions:
    parsed = parse_sink_options(options)
    if overwrite:
        raise SinkError("sparkmq topics are append-only: use mode('append'), not 'overwrite'")
    shape = check_input_schema(schema, parsed.topic)
    if parsed.endpoint_from_bootstrap and parsed.endpoint is not None:
        problem = bootstrap_problem(parsed.endpoint, parsed.request_timeout_s)
        if problem is not None:
            raise InvalidSinkOption(BOOTSTRAP_SERVERS, problem)
    return dataclasses.replace(parsed, shape=shape)


# -- executors ------------------------------------------------------------------------------------


def stage_task(
    options: SinkOptions, sink_id: str, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> SinkCommitMessage:
    """Stage one task's rows as parts and name them (runs in a Spark Python worker)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    partition_id, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    parts = (_stage_local if options.path is not None else _stage_remote)(
        options, sink_id, batch_id, partition_id, attempt, (part_batch(b, options) for b in batches)
    )
    return SinkCommitMessage(sink_id, batch_id, partition_id, attempt, tuple(parts))


def _stage_local(
    options: SinkOptions,
    sink_id: str,
    batch_id: int,
    partition_id: int,
    attempt: int,
    batches: Iterator[pa.RecordBatch],
) -> list[tuple[str, int]]:
    assert options.path is not None
    part_id = new_part_id(partition_id, attempt)
    rows = write_part(part_path(staging_root(options.path), sink_id, batch_id, part_id), batches)
    return [(part_id, rows)]


def _stage_remote(
    options: SinkOptions,
    sink_id: str,
    batch_id: int,
    partition_id: int,
    attempt: int,
    batches: Iterator[pa.RecordBatch],
) -> list[tuple[str, int]]:
    """Upload the task's rows as parts of at most ``partMaxBytes`` each, counted as the broker
    receives them (Arrow IPC), not as Arrow's in-memory ``nbytes``: a batch larger than a part
    by itself (a backlog read in one micro-batch) is cut into row ranges first."""
    client = SinkClient.for_options(options)
    parts: list[tuple[str, int]] = []
    pending: list[pa.RecordBatch] = []
    size = 0

    def upload() -> None:
        nonlocal size
        part_id = new_part_id(partition_id, attempt, len(parts))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, PART_SCHEMA) as writer:
            for batch in pending:
                writer.write_batch(batch)
        parts.append((part_id, client.put_part(sink_id, batch_id, part_id, sink.getvalue().to_pybytes())))
        pending.clear()
        size = 0

    for batch in batches:
        for piece, piece_size in part_pieces(batch, options.part_max_bytes):
            if pending and size + piece_size > options.part_max_bytes:
                upload()
            pending.append(piece)
            size += piece_size
    if pending or not parts:
        upload()
    return parts


def part_pieces(batch: pa.RecordBatch, max_bytes: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """``batch`` as row ranges of at most ``max_bytes`` each in Arrow IPC (with their sizes), in
    order; a single row larger than that is its own piece (the broker then refuses it, by name)."""
    size = pa.ipc.get_record_batch_size(batch)
    if size <= max_bytes or batch.num_rows <= 1:
        yield batch, size
        return
    half = batch.num_rows // 2
    yield from part_pieces(batch.slice(0, half), max_bytes)
    yield from part_pieces(batch.slice(half), max_bytes)


def _task_batch_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if raw is None:
        raise SinkError(
            "no micro-batch id on this task: the streaming sink runs only inside a streaming query"
        )
    return int(raw)


def _task_sink_id(options: SinkOptions) -> str:
    if options.sink_id is not None:
        return options.sink_id
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
    if not query_id:
        raise SinkError("no streaming query id on this task: set the 'sinkId' option")
    return f"q-{query_id}"


# -- driver ---------------------------------------------------------------------------------------


def commit_batch(options: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
    """Decide and publish one batch (idempotent). Raises so that Spark fails the query when the
    batch cannot be committed; a restart from the checkpoint then completes it."""
    fault = Fault.parse(options.fault)
    ours = [m for m in messages if isinstance(m, SinkCommitMessage)]
    if len(ours) != len(messages):
        raise SinkError(
            f"batch {batch_id}: {len(messages) - len(ours)} task(s) returned no sparkmq commit message"
        )
    if not ours:
        return  # no partition at all: nothing was staged, nothing to publish
    sink_ids = {m.sink_id for m in ours}
    if len(sink_ids) != 1 or any(m.batch_id != batch_id for m in ours):
        raise SinkError(f"batch {batch_id}: tasks disagree on sink/batch: {sorted(sink_ids)}")
    sink_id = sink_ids.pop()
    parts = [StagedPart(p, rows) for m in sorted(ours, key=lambda m: m.partition_id) for p, rows in m.parts]
    fault.hit("before-commit")
    if options.path is not None:
        _commit_local(options.path, sink_id, batch_id, parts, fault)
    else:
        SinkClient.for_options(options).commit(sink_id, batch_id, parts)
    fault.hit("after-commit")


def open_store_for_commit(path: str, wait_s: float = LOCK_WAIT_S) -> MessageStore:
    """Open the store directory as its owner for one commit (path mode).

    Another short-lived owner (a second sink, a source mirroring group offsets) is waited for
    up to ``wait_s``; a directory still locked after that is taken to belong to a broker.
    After a clean shutdown (no ``abort`` file) the CommitLog's CRCs are not re-checked: that
    halves the recovery scan this open pays on every micro-batch. After a crash they are.
    """
    from streaming.backends import owner_config

    deadline = time.monotonic() + wait_s
    while True:
        config = owner_config(path)
        config = dataclasses.replace(config, check_crc_on_recover=config.abort_path.exists())
        try:
            return MessageStore.open(config)
        except StoreLocked as exc:
            if time.monotonic() >= deadline:
                raise SinkError(
                    f"sparkmq sink: the store directory {path} is owned by another process (a running "
                    "broker?): write through it with .option('endpoint', 'http://host:port') "
                    "instead of 'path'"
                ) from exc
            time.sleep(0.1)


def _commit_local(path: str, sink_id: str, batch_id: int, parts: list[StagedPart], fault: Fault) -> None:
    started = time.perf_counter()
    store = open_store_for_commit(path)
    opened = time.perf_counter()
    try:
        outcome = SinkStaging(store, on_event=fault.hit).commit(sink_id, batch_id, parts)
        published = time.perf_counter()
    finally:
        store.close()
    log.info(
        "sparkmq sink %s batch %d: %s (open %.3f s, publish %.3f s, close %.3f s)",
        sink_id, batch_id, outcome, opened - started, published - opened, time.perf_counter() - published,
    )  # fmt: skip


def abort_batch(options: SinkOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
    """Best effort: delete the staged parts of a failed attempt (never those already decided)."""
    ours = [m for m in messages if isinstance(m, SinkCommitMessage)]
    if not ours:
        return
    sink_id, part_ids = ours[0].sink_id, [p for m in ours for p, _ in m.parts]
    try:
        if options.path is not None:
            store = open_store_for_commit(options.path, wait_s=1.0)  # best effort
            try:
                SinkStaging(store).abort(sink_id, batch_id, part_ids)
            finally:
                store.close()
        else:
            SinkClient.for_options(options).abort(sink_id, batch_id, part_ids)
    except (SparkMQError, OSError) as exc:
        log.warning("sparkmq sink %s batch %d: abort left staged parts behind (%s)", sink_id, batch_id, exc)


# -- the writers -----------------------------------------------------------------------------------


class SparkMQStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writer; Spark builds a fresh one per commit, so it holds only options."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage_task(self.options, _task_sink_id(self.options), _task_batch_id(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        commit_batch(self.options, messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        abort_batch(self.options, messages, batchId)


class SparkMQBatchWriter(DataSourceArrowWriter):
    """``df.write``: one generated (or given) sink id per job, batch id 0; same commit path."""

    def __init__(self, options: SinkOptions, sink_id: str, batch_id: int) -> None:
        self.options = options
        self.sink_id = sink_id
        self.batch_id = batch_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage_task(self.options, self.sink_id, self.batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        commit_batch(self.options, messages, self.batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        abort_batch(self.options, messages, self.batch_id)


# -- test-only fault injection -------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """Test-only fault injection, from the undocumented option ``_faultInjection``.

    Format ``<point>:<action>:<marker file>``. ``point`` is ``before-commit``, ``after-commit``
    or a :class:`SinkStaging` event (``decided``, ``chunk-<k>``, ``published``; path mode).
    ``raise`` raises once (the marker file records that it happened); ``block`` creates the
    marker and then hangs, so that a test can ``kill -9`` the driver at exactly that point.
    Environment variables cannot do this: Spark's Python workers inherit the environment of
    the JVM, which a test session starts once.
    """

    point: str | None = None
    action: str = "raise"
    marker: str = ""

    @staticmethod
    def parse(spec: str | None) -> Fault:
        if not spec:
            return Fault()
        point, action, marker = spec.split(":", 2)
        return Fault(point, action, marker)

    def hit(self, point: str) -> None:
        if point != self.point or os.path.exists(self.marker):
            return
        Path(self.marker).write_text(f"{os.getpid()} {point}\n")
        if self.action == "block":
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:  # waiting to be killed
                time.sleep(0.5)
        raise SinkError(f"injected fault at {point} (test only)")
