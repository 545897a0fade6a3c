"""Staged, exactly-once publishing of Spark sink batches: stage, decide once, publish idempotently.

The server half of ``writeStream.format("sparkmq")`` (see docs/exactly_once.md). Used in
process by the Spark driver in ``path`` mode and by the HTTP broker in ``endpoint`` mode::

    <store_dir>/staging/<sink_id>/STATE.json                      {"last_published_batch": N}
    <store_dir>/staging/<sink_id>/<batch_id:020d>/part-<part_id>.arrow   staged rows (Arrow IPC file)
    <store_dir>/staging/<sink_id>/<batch_id:020d>/COMMIT.json            the decision (manifest)

1. **Stage.** Each Spark write task writes its rows (:data:`PART_SCHEMA`) as one or more
   *parts*, each atomically (tmp + fsync + rename). Readers see nothing.
2. **Decide.** ``commit(sink, batch, parts)`` writes ``COMMIT.json`` naming exactly those parts,
   with an exclusive create: if a decision for (sink, batch) exists (a replay after a crash),
   it wins and the new attempt's parts are ignored, whatever order or partitioning they have.
3. **Publish.** The rows of the decided parts are appended in manifest order, in chunks of
   ``chunk_rows``; chunk ``k`` of batch ``b`` carries the deterministic UNIQ_KEYs
   ``request_uniq_keys(ProducerRef(f"sink:{sink}:{b}", k), n)``. The call that created the
   manifest writes straight through; any later call (a replay, a retry, broker recovery)
   *resumes*: it waits for the key index, finds through it how much of each chunk is stored
   (a prefix: appends are all-or-nothing while the store runs, only a crash tears one, and
   then a prefix survives) and writes only the rest.
4. **Mark and collect.** ``STATE.json`` records the batch as published (atomically), then the
   batch's staging directory and every older one are deleted.

Across brokers (a cluster) the same protocol runs on the *coordinator* (the broker the sink
talks to), the decision also records the target topics' routes, and the chunks are stored by
the brokers owning their queues (:mod:`store.publish.sink_routed`; docs/exactly_once.md,
"Across brokers"): pass a :class:`~store.publish.sink_routed.SinkRouter` to :meth:`SinkStaging.commit`.

Per sink the durable state is one small file plus the directories of batches decided but not
yet published (at most one, unless publishing keeps failing). Dedupe of a resumed publish
relies on the key index, so it reaches back as far as retention keeps the batch's messages.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.config import FlushDiskType
from store.errors import InvalidArgument, MessageTooLarge, StoreError
from store.format.vocabulary import TIMER_REQUEST_PROPERTIES
from store.io.atomic_file import write_json_atomically
from store.message_store import MessageStore
from store.names import validate_topic
from store.publish.sink_chunks import ChunkWriter, chunk_uniq_keys
from store.publish.sink_log import SinkLog
from store.publish.sink_parts import (
    _ID_PATTERN,
    COMMIT_FILE,
    DEFAULT_CHUNK_ROWS,
    STATE_FILE,
    CommitOutcome,
    Manifest,
    SinkStagingError,
    StagedPart,
    batch_dir,
    check_id,
    part_path,
    read_part,
    staging_root,
    write_part_bytes,
)
from store.publish.sink_plan import scheduled_rows, topic_chunks
from store.publish.sink_routed import SinkRouter, check_routed, part_topics, publish_routed
from store.write.idempotence import ProducerRef
from store.write.timers import TimerRules, admit_timer

__all__ = ["SinkStaging", "chunk_uniq_keys"]

log = logging.getLogger("sparkmq.sink")

# -- the component ---------------------------------------------------------------------------


class SinkStaging:
    """Staging, decisions and idempotent publishing for every sink of one open store.

    Thread-safe: commits of one sink are serialised. In ``path`` mode the Spark driver builds
    one over a store it opened (it holds the directory lock); the broker builds one at start.
    """

    def __init__(
        self,
        store: MessageStore,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """``on_event(name)`` is called at each step of a commit (``decided``, ``chunk-<k>``
        after chunk k is stored, ``published``) and, across brokers, after this broker stored
        a chunk it owns (``stored-<k>``): a seam for fault-injection tests."""
        if chunk_rows < 1:
            raise InvalidArgument("chunk_rows must be >= 1")
        self._on_event = on_event
        self.store = store
        #: Stores chunks exactly once: this broker's own, and (as an owner) those a coordinator sends.
        self.writer = ChunkWriter(store, on_event=on_event)
        self.root = staging_root(store.config.store_dir)
        self.chunk_rows = chunk_rows
        #: A replica group's member also keeps parts and decisions in its CommitLog, where its
        #: slaves receive them (a failover then loses no staged part and no decision); a
        #: member that is not the master refuses to stage or decide (NotMaster, retriable).
        self.log = SinkLog(store) if store.replicated else None
        self._guard = threading.Lock()
        self._sink_locks: dict[str, threading.Lock] = {}

    def _event(self, name: str) -> None:
        if self._on_event is not None:
            self._on_event(name)

    def _sink_lock(self, sink_id: str) -> threading.Lock:
        with self._guard:
            return self._sink_locks.setdefault(sink_id, threading.Lock())

    # staging (HTTP uploads; path-mode executors call write_part directly) ---------------------
    def stage_part(self, sink_id: str, batch_id: int, part_id: str, payload: bytes) -> StagedPart:
        """Stage an uploaded part (checked first); in a replica group it is staged once its
        slaves hold it too (raises the store's errors otherwise: the writer's task retries)."""
        path = part_path(self.root, sink_id, batch_id, part_id)
        if self.log is not None:
            self.store.check_writable()  # only the group's master stages (NotMaster, retriable)
        staged = StagedPart(part_id, write_part_bytes(path, payload))
        if self.log is not None:
            self.log.put_part(sink_id, batch_id, part_id, payload)
        return staged

    # state -------------------------------------------------------------------------------------
    def last_published(self, sink_id: str) -> int:
        """Highest published batch id of ``sink_id`` (-1 when none)."""
        path = self.root / check_id("sink id", sink_id) / STATE_FILE
        try:
            return int(json.loads(path.read_text(encoding="utf-8"))["last_published_batch"])
        except FileNotFoundError:
            return -1

    def _batch_dirs(self, sink_id: str) -> list[tuple[int, Path]]:
        sink_dir = self.root / sink_id
        if not sink_dir.is_dir():
            return []
        found = [(int(p.name), p) for p in sink_dir.iterdir() if p.is_dir() and p.name.isdigit()]
        return sorted(found)

    def pending(self, sink_id: str) -> list[int]:
        """Batches decided (manifest written) but not yet published."""
        last = self.last_published(sink_id)
        return [b for b, d in self._batch_dirs(sink_id) if b > last and (d / COMMIT_FILE).exists()]

    def sinks(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and _ID_PATTERN.match(p.name))

    # commit / abort / recover --------------------------------------------------------------
    def commit(
        self,
        sink_id: str,
        batch_id: int,
        parts: Sequence[StagedPart],
        router: SinkRouter | None = None,
    ) -> CommitOutcome:
        """Decide (once) which parts make batch ``batch_id`` of ``sink_id``, then publish them.

        Idempotent: a replay of a published batch does nothing; a replay of a decided but
        unpublished batch publishes the *earlier* decision and ignores ``parts``. Earlier
        decided batches of the sink are published first. Raises when a part is missing or
        unpublishable (nothing decided then) or when the store refuses a write (the decision
        stands; the next call resumes). With ``router`` (a cluster) the decision records the
        target topics' routes and each row is stored by the broker owning its queue; an owner
        that is down raises :class:`~store.publish.sink_parts.OwnerUnavailable`.
        """
        check_id("sink id", sink_id)
        if self.log is not None:
            # Only the group's master decides: a slave's log may lack parts its master staged
            # (not replicated here yet), and "missing" would be final; NotMaster is retriable.
            self.store.check_writable()
        with self._sink_lock(sink_id):
            last = self.last_published(sink_id)
            if batch_id <= last:
                self._collect(sink_id, last)
                return CommitOutcome(sink_id, batch_id, 0, already_published=True, decided_now=False)
            for earlier in self.pending(sink_id):
                if earlier < batch_id:
                    self._publish_decided(sink_id, earlier, router)
            manifest_path = batch_dir(self.root, sink_id, batch_id) / COMMIT_FILE
            decided_now = False
            replicated = self._logged_decision(sink_id, batch_id)
            if replicated is None and not manifest_path.exists():
                manifest = self._decision(sink_id, batch_id, parts, router)
                if self.log is not None:
                    # The group's decision, acknowledged by the slaves before anything of the
                    # batch is published (and before this member's own file): a master that
                    # dies after this leaves its successor the same decision.
                    self.log.put_decision(manifest)
                manifest_path.parent.mkdir(parents=True, exist_ok=True)
                decided_now = write_json_atomically(manifest_path, manifest.to_json(), exclusive=True)
            elif replicated is None and self.log is not None:
                # A decision this member made before its store was replicated: the group's now.
                self.log.put_decision(Manifest.load(manifest_path))
            manifest = replicated if replicated is not None else Manifest.load(manifest_path)
            if not decided_now:
                log.info(
                    "sink %s batch %d: replay; keeping the earlier decision (%d parts)",
                    sink_id, batch_id, len(manifest.parts),
                )  # fmt: skip
            self._event("decided")
            self._publish(manifest, resume=not decided_now, router=router)
            self._event("published")
            self._mark_published(sink_id, batch_id)
            return CommitOutcome(sink_id, batch_id, manifest.rows, decided_now=decided_now)

    def _decision(
        self, sink_id: str, batch_id: int, parts: Sequence[StagedPart], router: SinkRouter | None
    ) -> Manifest:
        """The manifest to decide, after checking the store(s) would accept every row."""
        manifest = Manifest(sink_id, batch_id, tuple(parts), self.chunk_rows)
        tables = self._check_parts(manifest)
        if router is None:
            self._check_local_queues(tables)
            return manifest
        routes = dict(router.routes(part_topics(tables)))
        check_routed(tables, routes, batch_id)
        return Manifest(sink_id, batch_id, tuple(parts), self.chunk_rows, routes)

    def abort(self, sink_id: str, batch_id: int, part_ids: Iterable[str]) -> int:
        """Delete staged parts of a failed attempt (never those a decision names). Best effort."""
        check_id("sink id", sink_id)
        with self._sink_lock(sink_id):
            directory = batch_dir(self.root, sink_id, batch_id)
            keep: set[str] = set()
            if (directory / COMMIT_FILE).exists():
                keep = {p.part_id for p in Manifest.load(directory / COMMIT_FILE).parts}
            removed = 0
            for part_id in part_ids:
                if part_id not in keep:
                    path = part_path(self.root, sink_id, batch_id, part_id)
                    if path.exists():
                        path.unlink()
                        removed += 1
            return removed

    def recover(self, router: SinkRouter | None = None) -> list[CommitOutcome]:
        """Publish every decided-but-unpublished batch of every sink and collect garbage.

        Run at broker start (and harmless at any time). A sink whose publish fails is logged
        and left for its next commit; the others proceed. Without ``router`` a sink whose next
        batch was decided across brokers is left for later (its commit, or a recovery with one).
        """
        outcomes: list[CommitOutcome] = []
        for sink_id in self.sinks():
            with self._sink_lock(sink_id):
                try:
                    for batch_id in self.pending(sink_id):
                        if router is None and self._is_routed(sink_id, batch_id):
                            log.info("sink %s batch %d: decided across brokers; left for the cluster",
                                     sink_id, batch_id)  # fmt: skip
                            break
                        outcomes.append(self._publish_decided(sink_id, batch_id, router))
                    self._collect(sink_id, self.last_published(sink_id))
                except (StoreError, OSError) as exc:
                    log.error("sink %s: could not resume publishing: %s", sink_id, exc)
        return outcomes

    def _is_routed(self, sink_id: str, batch_id: int) -> bool:
        return Manifest.load(batch_dir(self.root, sink_id, batch_id) / COMMIT_FILE).routes is not None

    def _logged_decision(self, sink_id: str, batch_id: int) -> Manifest | None:
        """A replica group: the batch's decision as the log holds it (a master before a
        failover may have made it), written to this member's staging too. It wins over this
        member's own file, which a decision it made as an earlier master and never got
        acknowledged may have left."""
        if self.log is None:
            return None
        found = self.log.decision(sink_id, batch_id)
        if found is not None:
            path = batch_dir(self.root, sink_id, batch_id) / COMMIT_FILE
            if not path.exists() or Manifest.load(path) != found:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_json_atomically(path, found.to_json())
        return found

    def _publish_decided(self, sink_id: str, batch_id: int, router: SinkRouter | None) -> CommitOutcome:
        manifest = self._logged_decision(sink_id, batch_id) or Manifest.load(
            batch_dir(self.root, sink_id, batch_id) / COMMIT_FILE
        )
        log.info("sink %s: resuming publish of decided batch %d (%d rows)", sink_id, batch_id, manifest.rows)
        self._publish(manifest, resume=True, router=router)
        self._mark_published(sink_id, batch_id)
        return CommitOutcome(sink_id, batch_id, manifest.rows, decided_now=False)

    def _mark_published(self, sink_id: str, batch_id: int) -> None:
        if self.store.config.flush_disk_type is not FlushDiskType.SYNC_FLUSH:
            self.store.flush()  # the staged copy goes away next: the published one must be on disk
        write_json_atomically(self.root / sink_id / STATE_FILE, {"last_published_batch": batch_id})
        self._collect(sink_id, batch_id)

    def _collect(self, sink_id: str, last_published: int) -> None:
        """Delete staging of published batches and orphans of older attempts."""
        for batch_id, directory in self._batch_dirs(sink_id):
            if batch_id <= last_published:
                shutil.rmtree(directory, ignore_errors=True)
        sink_dir = self.root / sink_id
        for stray in sink_dir.glob(".*.tmp") if sink_dir.is_dir() else ():
            stray.unlink(missing_ok=True)

    # validation and publishing ---------------------------------------------------------------
    def _check_parts(self, manifest: Manifest) -> list[pa.Table]:
        """Refuse a decision whose rows the store would refuse: nothing is decided then.
        Returns the parts' rows (memory-mapped) in manifest order."""
        max_body = self.store.config.max_message_size_bytes
        tables = []
        for part in manifest.parts:
            table = self._read_part(manifest, part.part_id)
            tables.append(table)
            if table.num_rows != part.rows:
                raise SinkStagingError(
                    f"staged part {part.part_id} has {table.num_rows} rows, the writer reported {part.rows}"
                )
            if table.num_rows == 0:
                continue
            longest = pc.max(pc.binary_length(table.column("body"))).as_py()
            if longest is not None and longest > max_body:
                raise MessageTooLarge(f"a body is {longest} bytes; the limit is {max_body}")
            self._check_timers(table)
            for topic in pc.unique(table.column("topic")).to_pylist():
                validate_topic(topic)
        return tables

    def _read_part(self, manifest: Manifest, part_id: str) -> pa.Table:
        """A staged part (memory-mapped); in a replica group one staged at an earlier master
        comes from the log (written to this member's staging first)."""
        path = part_path(self.root, manifest.sink_id, manifest.batch_id, part_id)
        if self.log is not None and not path.exists():
            payload = self.log.read_part(manifest.sink_id, manifest.batch_id, part_id)
            if payload is not None:
                log.info("sink %s batch %d: part %s staged at an earlier master, read from the log",
                         manifest.sink_id, manifest.batch_id, part_id)  # fmt: skip
                write_part_bytes(path, payload)
        return read_part(path)

    def _check_local_queues(self, tables: Sequence[pa.Table]) -> None:
        """Lone broker: the topics exist (auto-created here) and explicit queue ids are in range."""
        for table in tables:
            if table.num_rows == 0:
                continue
            topics = pc.unique(table.column("topic")).to_pylist()
            queue_ids = table.column("queue_id")
            for topic in topics:
                count = self.store.ensure_topic(topic)
                if queue_ids.null_count == len(queue_ids):
                    continue
                mine = queue_ids
                if len(topics) > 1:
                    mine = queue_ids.filter(pc.equal(table.column("topic"), topic))
                low, high = pc.min(mine).as_py(), pc.max(mine).as_py()
                if high is not None and (high >= count or low < 0):
                    bad = high if high >= count else low
                    raise InvalidArgument(f"queue_id {bad} is outside topic {topic!r}'s {count} queues")

    def _check_timers(self, table: pa.Table) -> None:
        """Refuse a timer beyond the maximum delay now, before deciding (a delay only shrinks
        until the publish, so the store accepts it then)."""
        scheduled = scheduled_rows(table)
        if not scheduled.any():
            return
        rules = TimerRules(self.store.config.timer_max_delay_ms, self.store.config.timer_precision_ms)
        now = self.store.now_ms()
        for row in np.flatnonzero(scheduled).tolist():
            properties = dict(table.column("properties")[row].as_py() or ())
            if any(name in properties for name in TIMER_REQUEST_PROPERTIES):
                admit_timer(properties, now, rules)

    def _publish(self, manifest: Manifest, *, resume: bool, router: SinkRouter | None) -> None:
        tables = [self._read_part(manifest, part.part_id) for part in manifest.parts]
        if manifest.routes is not None:
            if router is None:
                raise SinkStagingError(
                    f"sink {manifest.sink_id} batch {manifest.batch_id} was decided across brokers: "
                    "only a broker in the cluster can publish it"
                )
            publish_routed(manifest, tables, router, self.writer, fresh=not resume, on_event=self._event)
            return
        if resume:
            self.writer.wait_indexed()
        producer_id = f"sink:{manifest.sink_id}:{manifest.batch_id}"
        sequence = 0
        for table in tables:
            for topic, chunk, delayed in topic_chunks(table, manifest.chunk_rows):
                ref = ProducerRef(producer_id, sequence)
                sequence += 1
                stored = self.writer.put(topic, chunk, ref, check=resume, delayed=delayed)
                # Chunks are appended in order, each all-or-nothing: a chunk not (fully) stored
                # means no later chunk is stored either, so the rest writes straight through.
                resume = resume and stored == chunk.num_rows
                self._event(f"chunk-{ref.sequence}")
