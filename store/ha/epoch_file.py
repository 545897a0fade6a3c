"""The epoch file: which master epoch wrote which part of the CommitLog (RocketMQ 5 ``EpochFileCache``).

``{store_dir}/epochFileCheckpoint`` in RocketMQ's text format
(``common/src/main/java/org/apache/rocketmq/common/utils/CheckpointFile.java`` lines 31-43 and
``write`` lines 77-96; the entry line is ``EpochFileCache.EpochEntrySerializer``, lines 305-326)::

    2                  line 1: number of entries
    773307083          line 2: CRC32 of the entry text (lines 3.. with their "\\n"), masked to 31 bits
    7-7000             one line per entry: "{epoch}-{startOffset}", oldest first
    8-8000

RocketMQ writes it with ``MixAll.string2File`` (copy to ``.bak``, no fsync). Here it is written
with Kafka's discipline instead (``LeaderEpochCheckpointFile``; server-common
``CheckpointFile.java`` lines 72-86): the text goes to a temporary file, is fsynced, renamed
over the name and the directory is fsynced (:func:`store.io.atomic_file.write_atomically`). A
crash leaves the old file or the new one; a torn temporary file is ignored and removed at load.
RocketMQ's reader accepts the file as written here (an empty list is ``"0\\n0\\n"``: count 0,
CRC 0 = "do not check", ``CheckpointFile.java`` line 131).

An entry ``(epoch, start)`` says the master of ``epoch`` wrote the CommitLog from ``start`` to
the next entry's start (the last entry: to the log's end). Entries only grow: strictly larger
epoch *and* strictly larger start (``EpochFileCache.appendEntry``, lines 101-118).
:func:`find_consistent_point` is ``EpochFileCache.findConsistentPoint`` (lines 222-245): from
the newest local epoch down, the first epoch the master has with the same start offset gives
the truncation point ``min(local end, master end)``.

The codec (:func:`encode_epoch_file`, :func:`decode_epoch_file`) and the comparisons are pure
functions; :class:`EpochFile` does the I/O.
"""

from __future__ import annotations

import itertools
import logging
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from store.ha.errors import EpochFileCorrupt, EpochNotIncreasing
from store.io.atomic_file import write_atomically

log = logging.getLogger("sparkmq.ha")

#: RocketMQ's name (``MessageStoreConfig.getStorePathEpochFile``: ``storePathRootDir/epochFileCheckpoint``).
EPOCH_FILE_NAME: Final = "epochFileCheckpoint"
#: The entry text's CRC is ``UtilAll.crc32``: CRC32 masked to 31 bits.
CRC_MASK: Final = 0x7FFFFFFF
#: RocketMQ skips the CRC check when the stored value is this (``NOT_CHECK_CRC_MAGIC_CODE``).
NOT_CHECKED_CRC: Final = 0


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """The master of ``epoch`` wrote the CommitLog from ``start_offset`` on (``EpochEntry``)."""

    epoch: int
    start_offset: int


# --- codec -----------------------------------------------------------------------------------


def encode_epoch_file(entries: Sequence[EpochEntry]) -> bytes:
    """The file's bytes: count, CRC of the entry text, one ``epoch-start`` line per entry."""
    text = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode("ascii")
    crc = zlib.crc32(text) & CRC_MASK
    return f"{len(entries)}\n{crc}\n".encode("ascii") + text


def decode_epoch_file(data: bytes, where: str = "epoch file") -> list[EpochEntry]:
    """Entries of a file written by :func:`encode_epoch_file` (or by RocketMQ).

    Raises :class:`EpochFileCorrupt` when the count or the CRC does not match, a line is not
    ``epoch-start``, or the entries do not grow strictly (epoch and start offset).
    """
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as exc:
        raise EpochFileCorrupt(f"{where}: not ASCII text") from exc
    lines = text.split("\n")
    if len(lines) < 3 or lines[-1] != "":
        raise EpochFileCorrupt(f"{where}: expected a count line, a CRC line and entry lines")
    try:
        count, crc = int(lines[0]), int(lines[1])
    except ValueError as exc:
        raise EpochFileCorrupt(f"{where}: bad count or CRC line") from exc
    entry_lines = lines[2:-1]
    entries = [_parse_entry(line, where) for line in entry_lines]
    if len(entries) != count:
        raise EpochFileCorrupt(f"{where}: expected {count} entries, found {len(entries)}")
    body = "".join(f"{line}\n" for line in entry_lines).encode("ascii")
    actual = zlib.crc32(body) & CRC_MASK
    if crc not in (NOT_CHECKED_CRC, actual):
        raise EpochFileCorrupt(f"{where}: entry CRC is {actual}, the file says {crc}")
    for before, after in itertools.pairwise(entries):
        if not (after.epoch > before.epoch and after.start_offset > before.start_offset):
            raise EpochFileCorrupt(f"{where}: entry {after} does not follow {before}")
    return entries


def _parse_entry(line: str, where: str) -> EpochEntry:
    epoch, sep, start = line.partition("-")
    try:
        if not sep:
            raise ValueError(line)
        return EpochEntry(int(epoch), int(start))
    except ValueError as exc:
        raise EpochFileCorrupt(f"{where}: bad entry line {line!r}") from exc


# --- comparisons (pure) ----------------------------------------------------------------------


def end_offsets(entries: Sequence[EpochEntry], log_end: int) -> list[int]:
    """Where each entry's range ends: the next entry's start, ``log_end`` for the last one."""
    return [e.start_offset for e in entries[1:]] + ([log_end] if entries else [])


def entry_for_offset(
    entries: Sequence[EpochEntry], offset: int
) -> tuple[EpochEntry, EpochEntry | None] | None:
    """``(entry, next entry)`` of the epoch that wrote ``offset`` (``findEpochEntryByOffset``);
    the last entry covers everything from its start on. None when ``offset`` precedes them all."""
    for i in range(len(entries) - 1, -1, -1):
        if entries[i].start_offset <= offset:
            return entries[i], entries[i + 1] if i + 1 < len(entries) else None
    return None


def find_consistent_point(
    local: Sequence[EpochEntry], local_end: int, master: Sequence[EpochEntry], master_end: int
) -> int | None:
    """The CommitLog offset up to which the local log and the master's share their history.

    ``EpochFileCache.findConsistentPoint``: walk the local epochs newest first; the first one
    the master has *with the same start offset* gives ``min(its local end, its master end)``,
    where an epoch ends at the next entry's start (the last one at the log's end). None when
    no epoch matches (the logs share nothing the epochs can vouch for).
    """
    local_ends = end_offsets(local, local_end)
    master_ends = dict(zip((e.epoch for e in master), end_offsets(master, master_end), strict=True))
    master_starts = {e.epoch: e.start_offset for e in master}
    for entry, end in zip(reversed(local), reversed(local_ends), strict=True):
        if master_starts.get(entry.epoch) == entry.start_offset:
            return min(end, master_ends[entry.epoch])
    return None


# --- the file --------------------------------------------------------------------------------


class EpochFile:
    """``epochFileCheckpoint`` of one store directory; thread-safe.

    Every change rewrites the whole file atomically and durably before it returns, so an
    entry reported as appended survives ``kill -9`` and power loss.
    """

    def __init__(self, store_dir: Path) -> None:
        self.path = store_dir / EPOCH_FILE_NAME
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] = tuple(self._load())

    def _load(self) -> list[EpochEntry]:
        for stale in self.path.parent.glob(f".{EPOCH_FILE_NAME}.*.tmp"):
            log.warning("removing %s: a torn write of the epoch file (the rename never happened)", stale)
            stale.unlink(missing_ok=True)
        if not self.path.exists():
            self._write([])
            return []
        return decode_epoch_file(self.path.read_bytes(), str(self.path))

    def _write(self, entries: Sequence[EpochEntry]) -> None:
        data = encode_epoch_file(entries)

        def fill(temp: Path) -> None:
            temp.write_bytes(data)

        write_atomically(self.path, fill)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def last_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def last_epoch(self) -> int:
        """The newest epoch, -1 when there is none (``EpochFileCache.lastEpoch``)."""
        last = self.last_entry
        return -1 if last is None else last.epoch

    def append(self, entry: EpochEntry) -> None:
        """Add ``entry`` (durably). Raises :class:`EpochNotIncreasing` unless both its epoch
        and its start offset are larger than the last entry's."""
        with self._lock:
            last = self._entries[-1] if self._entries else None
            if last is not None and (entry.epoch <= last.epoch or entry.start_offset <= last.start_offset):
                raise EpochNotIncreasing(f"epoch entry {entry} does not follow the last one, {last}")
            self._replace((*self._entries, entry))

    def truncate_suffix_by_offset(self, offset: int) -> tuple[EpochEntry, ...]:
        """Drop entries starting at or after ``offset`` (``truncateSuffixByOffset``); returns
        the dropped ones."""
        with self._lock:
            kept = tuple(e for e in self._entries if e.start_offset < offset)
            return self._replace(kept)

    def truncate_suffix_by_epoch(self, epoch: int) -> tuple[EpochEntry, ...]:
        """Drop entries of ``epoch`` and later (``truncateSuffixByEpoch``)."""
        with self._lock:
            return self._replace(tuple(e for e in self._entries if e.epoch < epoch))

    def clear(self) -> tuple[EpochEntry, ...]:
        """Drop every entry (a replica rebuilt from scratch)."""
        with self._lock:
            return self._replace(())

    def reconcile(self, log_end: int) -> tuple[EpochEntry, ...]:
        """After a restart: drop entries that start beyond the CommitLog's end (a crash between
        a log truncation and the epoch file's); an entry starting *at* the end is a new epoch
        without data yet and stays."""
        with self._lock:
            return self._replace(tuple(e for e in self._entries if e.start_offset <= log_end))

    def _replace(self, kept: tuple[EpochEntry, ...]) -> tuple[EpochEntry, ...]:
        """Make ``kept`` the entries (durably); returns the entries that went."""
        if kept == self._entries:
            return ()
        dropped = tuple(e for e in self._entries if e not in kept)
        self._write(kept)
        self._entries = kept
        if dropped:
            log.warning("%s: dropped epoch entries %s", self.path, list(dropped))
        return dropped
