"""The key index of a store: every IndexFile in ``index/`` (:class:`IndexService`) and the thread
that fills them (:class:`IndexDispatcher`). One file's layout is :mod:`store.index.index_file`.

``IndexService`` names files by their creation time, starts a new one when the current one is
full, answers queries newest file first and deletes files below the CommitLog's minimum.

The index thread builds the key index from dispatch batches, behind the put path.

The put path hands every :class:`~store.commitlog.dispatch_batch.DispatchBatch` over and returns; the
index may lag by a few batches and catches up. :meth:`IndexDispatcher.wait_indexed` lets
queries see every write acknowledged before they started. Without a thread (``threaded=False``,
used when background services are off) batches are indexed inline.

A batch that fails to index is never skipped: ``indexed_to`` stays before it, the thread retries
it (with back-off, together with what arrived meanwhile; indexing is idempotent) and
:meth:`IndexDispatcher.health` reports the failure. So a lookup that waits for the index (an
idempotent retry, a sink resuming its publish) waits or is refused, and never misses a
message that is stored but not indexed.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from store.commitlog.dispatch_batch import DispatchBatch, string_array
from store.config import StoreConfig
from store.errors import StoreError
from store.format.arrow_ranges import ArrowStrings
from store.format.java_hash import index_key_hash, prefixed_index_key_hashes
from store.format.vocabulary import enter_index
from store.index.index_file import (
    FILE_NAME_FORMAT,
    I32,
    I64,
    KEY_SEPARATOR,
    IndexFile,
    IndexHeader,
    build_key,
    index_file_size,
)
from store.io.atomic_file import fsync_path
from store.io.clock import Clock, wall_clock_ms
from store.io.fs import FileSystem
from store.services import ServiceHealth

log = logging.getLogger("sparkmq.store")


def file_name_for(timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` (UTC) of a timestamp."""
    moment = datetime.fromtimestamp(timestamp_ms // 1000, tz=UTC)
    return moment.strftime(FILE_NAME_FORMAT) + f"{timestamp_ms % 1000:03d}"


def timestamp_of_file_name(name: str) -> int:
    moment = datetime.strptime(name[:14], FILE_NAME_FORMAT).replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1000 + int(name[14:])


def _is_index_file_name(name: str) -> bool:
    return len(name) == 17 and name.isdigit()


#: Up to this many rows a batch's index keys are hashed one by one in Python (~3 µs a key); above
#: it they are hashed together (a matrix product per key length: 1.3 µs a key at 15 rows, 0.5 at
#: 45, 0.2 at 200). Columns already in Arrow (a columnar batch, a CommitLog scan) take Arrow's
#: kernels above ARROW_INDEX_ROWS instead: their ~0.18 ms fixed cost then pays off.
SCALAR_INDEX_ROWS = 8
ARROW_INDEX_ROWS = 40


def index_key_entries(batch: DispatchBatch, rows: I64) -> tuple[I32, I64]:
    """The index entries of ``rows`` of a batch, in order: per message ``topic#UNIQ_KEY`` then
    ``topic#token`` for each KEYS token; returns (key hashes, the row of each key)."""
    if len(rows) <= SCALAR_INDEX_ROWS:
        return index_key_entries_scalar(batch, rows)
    if len(rows) > ARROW_INDEX_ROWS and isinstance(batch.uniq_keys, ArrowStrings):
        return index_key_entries_arrow(batch, rows)
    return index_key_entries_listed(batch, rows)


def index_key_entries_listed(batch: DispatchBatch, rows: I64) -> tuple[I32, I64]:
    """:func:`index_key_entries` over the keys as Python strings, hashed together from their
    parts (:func:`prefixed_index_key_hashes`: one matrix product per key length, no key string
    joined): for key columns given as Python lists (the single produces' group commits), and
    small Arrow ones."""
    texts, at = _index_keys(batch, rows)
    if not texts:
        return np.zeros(0, dtype=np.int32), at
    prefixes = [t + KEY_SEPARATOR for t in batch.topics]
    return prefixed_index_key_hashes(prefixes, batch.topic_codes[at], texts), at


def index_key_entries_arrow(batch: DispatchBatch, rows: I64) -> tuple[I32, I64]:
    """:func:`index_key_entries` with Arrow kernels, hashed from the parts: no key string is
    ever joined."""
    every_row = len(rows) == len(batch)  # rows are ascending and distinct: all of them
    take = None if every_row else pa.array(rows)
    prefixes = [t + KEY_SEPARATOR for t in batch.topics]
    topic_codes = batch.topic_codes[rows]
    uniq_parent, uniq = _non_empty(_rows_of(string_array(batch.uniq_keys), take))
    keys = _rows_of(string_array(batch.keys), take)
    if keys.null_count == len(keys):
        token_parent, flat_tokens = np.zeros(0, dtype=np.int64), keys.slice(0, 0)
    else:
        tokens = pc.split_pattern(keys, " ")
        present, flat_tokens = _non_empty(pc.list_flatten(tokens))
        token_parent = np.asarray(pc.list_parent_indices(tokens), dtype=np.int64)[present]
    parents = np.concatenate((uniq_parent, token_parent))
    hashes = np.concatenate(
        (
            prefixed_index_key_hashes(prefixes, topic_codes[uniq_parent], uniq),
            prefixed_index_key_hashes(prefixes, topic_codes[token_parent], flat_tokens),
        )
    )
    # per message: its UNIQ_KEY entry first, then its tokens (a stable sort by message)
    rank = np.concatenate((np.zeros(len(uniq_parent), np.int64), np.ones(len(token_parent), np.int64)))
    order = np.lexsort((rank, parents))
    return hashes[order], rows[parents[order]]


def _rows_of(strings: pa.Array, take: pa.Array | None) -> pa.Array:
    return strings if take is None else strings.take(take)


def _non_empty(strings: pa.Array) -> tuple[I64, pa.Array]:
    """The positions of the non-null, non-empty strings, and those strings (read off the
    offsets and the validity bitmap: no kernel call when every string is there)."""
    count = len(strings)
    if strings.null_count == count:
        return np.zeros(0, dtype=np.int64), strings.slice(0, 0)
    if strings.type == pa.string():
        begin = strings.offset
        offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32, count=begin + count + 1)[begin:]
        keep = np.diff(offsets) > 0
    else:
        keep = np.asarray(pc.binary_length(strings).fill_null(0)) > 0
    if strings.null_count:
        keep &= np.asarray(strings.is_valid())
    if keep.all():
        return np.arange(count, dtype=np.int64), strings
    return np.flatnonzero(keep), strings.filter(pa.array(keep))


def index_key_entries_scalar(batch: DispatchBatch, rows: I64) -> tuple[I32, I64]:
    """:func:`index_key_entries` one key at a time: RocketMQ's rule as written,
    ``abs(("topic#" + key).hashCode())`` per UNIQ_KEY and per non-empty KEYS token."""
    texts, at = _index_keys(batch, rows)
    topics, codes = batch.topics, batch.topic_codes
    hashes = [
        index_key_hash(topics[int(codes[row])] + KEY_SEPARATOR + key)
        for key, row in zip(texts, at.tolist(), strict=True)
    ]
    return np.array(hashes, dtype=np.int32), at


def _index_keys(batch: DispatchBatch, rows: I64) -> tuple[list[str], I64]:
    """The keys ``rows`` are indexed under, in order (per message its UNIQ_KEY, then each
    non-empty KEYS token), and the row of each."""
    keys: list[str] = []
    key_rows: list[int] = []
    columns = (_values(batch.uniq_keys, rows), _values(batch.keys, rows))
    for row, uniq, tokens in zip(rows.tolist(), *columns, strict=True):
        for key in [uniq, *(tokens.split(" ") if tokens else ())]:
            if key:
                keys.append(key)
                key_rows.append(row)
    return keys, np.array(key_rows, dtype=np.int64)


def _values(column: Sequence[str | None], rows: I64) -> list[str | None]:
    if isinstance(column, ArrowStrings):
        return column.array.take(pa.array(rows)).to_pylist()  # type: ignore[no-any-return]
    return [column[row] for row in rows.tolist()]


class IndexService:
    """All index files under ``index/``, oldest first; the last one takes new entries.

    Deleted files are unlinked and dropped from the list, their mappings released when the
    last concurrent query lets go of them.
    """

    def __init__(
        self,
        directory: Path,
        slot_count: int,
        max_entries: int,
        *,
        read_only: bool = False,
        clock_ms: Clock = wall_clock_ms,
        fs: FileSystem | None = None,
    ) -> None:
        self.directory = directory
        self._fs = fs
        self.slot_count = slot_count
        self.max_entries = max_entries
        self.read_only = read_only
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        if not read_only:
            directory.mkdir(parents=True, exist_ok=True)
        self._files: list[IndexFile] = [self._open(path) for path in self._listed()]

    @staticmethod
    def from_config(
        config: StoreConfig,
        *,
        read_only: bool = False,
        clock_ms: Clock = wall_clock_ms,
        fs: FileSystem | None = None,
    ) -> IndexService:
        return IndexService(
            config.index_dir,
            config.index_hash_slots,
            config.index_max_entries,
            read_only=read_only,
            clock_ms=clock_ms,
            fs=fs,
        )

    def _listed(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        paths = sorted(p for p in self.directory.iterdir() if _is_index_file_name(p.name))
        if self.read_only:  # a writer may be creating the newest file right now
            size = index_file_size(self.slot_count, self.max_entries)
            paths = [p for p in paths if p.stat().st_size >= size]
        return paths

    def _open(self, path: Path) -> IndexFile:
        return IndexFile(path, self.slot_count, self.max_entries, read_only=self.read_only, fs=self._fs)

    @property
    def files(self) -> list[IndexFile]:
        return list(self._files)

    def _require_writable(self) -> None:
        if self.read_only:
            raise StoreError(f"{self.directory}: index opened read-only")

    # Writes ----------------------------------------------------------------------------------
    def last_indexed_offset(self) -> int:
        """CommitLog offset of the newest indexed message, -1 when none (replays skip up to it)."""
        files = self._files
        if not files or (len(files) == 1 and files[0].header.index_count <= 1):
            return -1
        return files[-1].header.end_phy_offset

    def dispatch(self, batch: DispatchBatch) -> int:
        """Index ``topic#UNIQ_KEY`` and ``topic#token`` per KEYS token; returns entries written.

        ROLLBACK transaction messages and messages at or below :meth:`last_indexed_offset`
        (a replay after recovery) are skipped, like RocketMQ ``IndexService.buildIndex``.
        """
        wanted = enter_index(batch.sys_flags) & (batch.commitlog_offsets > self.last_indexed_offset())
        rows = np.flatnonzero(wanted)
        if len(rows) == 0:
            return 0
        hashes, key_rows = index_key_entries(batch, rows)
        if len(hashes) == 0:
            return 0
        return self.put_hashes(hashes, batch.commitlog_offsets[key_rows], batch.store_timestamps_ms[key_rows])

    def put_hashes(self, key_hashes: I32, phy_offsets: I64, store_timestamps_ms: I64) -> int:
        """Insert pre-hashed entries in order, rolling to new files when full."""
        self._require_writable()
        with self._lock:
            done = 0
            while done < len(key_hashes):
                done += self._writable_file().put_batch(
                    key_hashes[done:], phy_offsets[done:], store_timestamps_ms[done:]
                )
            return done

    def _writable_file(self) -> IndexFile:
        files = self._files
        if files and not files[-1].is_full:
            return files[-1]
        now_ms = self._clock_ms()
        if files:
            now_ms = max(now_ms, timestamp_of_file_name(files[-1].path.name) + 1)
        previous = files[-1].header if files else IndexHeader()
        created = IndexFile.create(
            self.directory / file_name_for(now_ms),
            self.slot_count,
            self.max_entries,
            end_phy_offset=previous.end_phy_offset,
            end_timestamp_ms=previous.end_timestamp_ms,
            fs=self._fs,
        )
        self._files = [*files, created]
        return created

    # Queries ---------------------------------------------------------------------------------
    def query(
        self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 2**63 - 1, max_results: int = 64
    ) -> list[int]:
        """CommitLog offsets of ``topic#key`` entries stored in ``[begin_ms, end_ms]``, newest first.

        Hash matches only: the caller must compare the real key of each message. Entry times
        have one-second resolution (``beginTimestamp + timeDiff*1000``), as in RocketMQ.
        """
        key_hash = index_key_hash(build_key(topic, key))
        found: list[int] = []
        for f in reversed(self._files):
            if self.read_only:
                f.reload_header()
            if f.is_time_matched(begin_ms, end_ms):
                f.select(key_hash, begin_ms, end_ms, max_results, found)
            if f.header.begin_timestamp_ms < begin_ms or len(found) >= max_results:
                break
        return found

    # Maintenance -----------------------------------------------------------------------------
    def delete_files_below(self, min_commitlog_offset: int) -> int:
        """Retention: delete files (never the last) whose endPhyOffset < the CommitLog min."""
        self._require_writable()
        with self._lock:
            files = self._files
            doomed = [f for f in files[:-1] if f.header.end_phy_offset < min_commitlog_offset]
            return self._drop(doomed, f"endPhyOffset below the CommitLog min {min_commitlog_offset}")

    def destroy_newer_than(self, timestamp_ms: int) -> int:
        """Abnormal recovery: delete files whose endTimestamp > checkpoint indexMsgTimestamp."""
        self._require_writable()
        with self._lock:
            newer = [f for f in self._files if f.header.end_timestamp_ms > timestamp_ms]
            return self._drop(newer, f"endTimestamp after the checkpoint's {timestamp_ms}")

    def drop_from(self, commitlog_offset: int) -> int:
        """A replica's truncation: delete the files holding entries of records at or beyond
        ``commitlog_offset`` (their endPhyOffset is there or later) and fsync the directory.
        Returns where re-indexing must start: the CommitLog offset of the newest entry still
        indexed (-1 when none); dispatch skips everything up to it."""
        self._require_writable()
        with self._lock:
            doomed = [f for f in self._files if f.header.end_phy_offset >= commitlog_offset]
            self._drop(doomed, f"entries at or beyond CommitLog offset {commitlog_offset} (truncation)")
        if doomed and self._fs is not None:
            self._fs.sync_dir(self.directory)
        elif doomed:
            fsync_path(self.directory)
        return self.last_indexed_offset()

    def _drop(self, doomed: list[IndexFile], reason: str) -> int:
        for f in doomed:
            log.warning("%s: deleting index file %s (%s)", self.directory, f.path.name, reason)
            if self._fs is not None:  # through the seam: a simulated crash must know it is gone
                self._fs.remove(f.path)
            else:
                f.path.unlink(missing_ok=True)
        gone = {id(f) for f in doomed}
        self._files = [f for f in self._files if id(f) not in gone]
        return len(doomed)

    def refresh(self) -> None:
        """Read-only mode: pick up new files and forget deleted ones."""
        if not self.read_only:
            return
        with self._lock:
            known = {f.path.name: f for f in self._files}
            self._files = [known.get(p.name) or self._open(p) for p in self._listed()]

    def flush(self) -> int:
        """msync dirty files; returns the store timestamp (ms) of the newest entry now on disk
        (0 when the index is empty) for the checkpoint's indexMsgTimestamp."""
        if self.read_only:
            return 0
        with self._lock:
            files = self._files
            for f in files:
                f.flush()
            return files[-1].header.end_timestamp_ms if files else 0

    def close(self) -> None:
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []

    def destroy(self) -> None:
        """Delete every index file (rebuild from the CommitLog)."""
        self._require_writable()
        with self._lock:
            for f in self._files:
                f.destroy()
            self._files = []


#: Most queued dispatch batches indexed together.
_MAX_COALESCED = 1024
#: Back-off between retries of a batch that failed to index (doubling, seconds).
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 5.0
#: A batch of fewer rows than this waits GATHER_S for company before it is indexed: each index
#: pass has a fixed cost (its NumPy set-up, the header write, a wake-up of this thread taking
#: the GIL from the put path), which single produces in groups of a dozen paid per group. Only
#: lookups that must see every stored message (``wait_indexed``: an idempotent request's first
#: attempt, a key query) wait for the index, and one arriving ends the wait at once.
GATHER_BELOW_ROWS, GATHER_S = 256, 0.005


class IndexDispatcher:
    def __init__(self, index: IndexService, indexed_to: int) -> None:
        self.index = index
        self._queue: queue.SimpleQueue[DispatchBatch | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        #: Callers of :meth:`wait_indexed` waiting now (the thread does not gather meanwhile).
        self._waiters = 0
        self._indexed_to = indexed_to
        self.failures = 0
        self.last_error: BaseException | None = None
        #: The last attempt to index failed; ``indexed_to`` is held before the failed batch.
        self.failing = False
        #: Without a thread: the batch that failed, retried with the next one.
        self._unindexed: DispatchBatch | None = None
        #: Index passes that succeeded (each may hold many dispatched batches).
        self.passes = 0

    @property
    def indexed_to(self) -> int:
        """CommitLog offset up to which every record is in the index."""
        return self._indexed_to

    def health(self) -> ServiceHealth:
        error = None if self.last_error is None else f"{type(self.last_error).__name__}: {self.last_error}"
        return ServiceHealth("index", not self.failing, self.failures, error)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="sparkmq-index", daemon=True)
        self._thread.start()

    def stop(self, drain: bool = True) -> None:
        """Stop the thread; with ``drain`` every queued batch is indexed first."""
        if self._thread is None:
            return
        if not drain:
            while not self._queue.empty():
                self._queue.get_nowait()
        self._queue.put(None)
        self._thread.join(30)
        self._thread = None

    def dispatch(self, batch: DispatchBatch) -> None:
        if self._thread is not None:
            self._queue.put(batch)
            return
        if self._unindexed is not None:  # inline: retry what failed before, then this batch
            batch = DispatchBatch.concat([self._unindexed, batch])
        self._unindexed = None if self._index(batch) else batch

    def catch_up(self, batches: Iterable[DispatchBatch]) -> None:
        """Index what recovery could not (a full disk, see ``store.recovery``): call before
        any later batch. Queued for the thread (retried with back-off), else indexed inline."""
        for batch in batches:
            if self._thread is not None:
                self._queue.put(batch)
            else:
                self.dispatch(batch)

    def reset_to(self, offset: int) -> None:
        """After a truncation at ``offset``: everything before it is indexed, nothing after it
        (call with the thread idle, every queued batch indexed)."""
        with self._cond:
            self._indexed_to = offset
            self._unindexed = None
            self._cond.notify_all()

    def wait_indexed(self, target: int, timeout_s: float) -> bool:
        """Block until everything before CommitLog offset ``target`` is indexed (False when
        ``timeout_s`` passes first, e.g. while indexing keeps failing)."""
        if self._thread is None:  # inline: nothing else will move it
            if self._unindexed is not None:
                batch, self._unindexed = self._unindexed, None
                self.dispatch(batch)
            return self._indexed_to >= target
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if self._indexed_to >= target:
                return True
            self._waiters += 1
            self._cond.notify_all()  # the thread gathering for company indexes now instead
            try:
                while self._indexed_to < target:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._waiters -= 1
        return True

    def _gather(self) -> None:
        """Wait up to GATHER_S for more batches, unless a lookup waits for the index."""
        with self._cond:
            if self._waiters == 0:
                self._cond.wait(GATHER_S)

    def _loop(self) -> None:
        """Index everything queued at once: many small puts cost one dispatch, not one each. A
        batch that failed is retried (with what arrived meanwhile) after a growing pause."""
        retry: DispatchBatch | None = None
        pause = _RETRY_FIRST_S
        while True:
            try:
                pending = [self._queue.get(timeout=pause if retry is not None else None)]
            except queue.Empty:
                pending = []
            if retry is None and pending[0] is not None and len(pending[0]) < GATHER_BELOW_ROWS:
                self._gather()
            while len(pending) < _MAX_COALESCED:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            batches = ([retry] if retry is not None else []) + [b for b in pending if b is not None]
            stopping = None in pending
            if batches:
                batch = DispatchBatch.concat(batches) if len(batches) > 1 else batches[0]
                retry = None if self._index(batch) else batch
                pause = _RETRY_FIRST_S if retry is None else min(pause * 2, _RETRY_MAX_S)
            if stopping:
                if retry is not None:
                    log.error(
                        "index thread stopping with %d record(s) not indexed: recovery rebuilds them",
                        len(retry),
                    )
                return

    def _index(self, batch: DispatchBatch) -> bool:
        """Index ``batch``; True on success (``indexed_to`` moves past it), False on failure."""
        try:
            self.index.dispatch(batch)
        except Exception as exc:
            self.failures += 1
            self.last_error = exc
            self.failing = True
            log.exception(
                "index dispatch failed for %d record(s) at %d (failure #%d); retrying, lookups wait",
                len(batch),
                int(batch.commitlog_offsets[0]),
                self.failures,
            )
            return False
        self.failing = False
        self.passes += 1
        with self._cond:
            self._indexed_to = max(self._indexed_to, batch.end_offset)
            self._cond.notify_all()
        return True
