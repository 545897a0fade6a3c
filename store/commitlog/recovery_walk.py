"""The CommitLog's recovery walk: an explicit, linear procedure.

Walk the records from a starting file (:meth:`RecoveryWalk.recover_normally` after a clean
shutdown, :meth:`RecoveryWalk.recover_abnormally` after a crash), stop at the first one that
does not check out, truncate everything after it and log file, offset and reason.
:class:`~store.commitlog.commitlog.CommitLog` inherits it; the walk itself is the CommitLog's
``_runs`` (shared with :meth:`~store.commitlog.commitlog.CommitLog.scan`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.commitlog.dispatch_batch import DispatchBatch
from store.commitlog.run_batches import TagsCodesFn, default_tags_codes, run_dispatch_batch
from store.format.record import MAGIC_V1, MAGIC_V2, RECORD_HEADER, RecordHeader
from store.format.record_check import RecordStatus, check_record
from store.io.mapped_file import MappedFile, MappedFileQueue

if TYPE_CHECKING:
    from store.format.record_scan import RecordRun

log = logging.getLogger("sparkmq.store")


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What the last recovery did."""

    #: Offset the walk started from (dispatch from here to rebuild derived structures).
    start_offset: int
    #: End of the last valid record; everything after it was truncated.
    end_offset: int
    #: Why the walk stopped ("end of data", "body CRC mismatch", ...).
    reason: str


@dataclass(slots=True)
class ScanStop:
    """Where and why a walk over the records stopped (:meth:`CommitLog.scan` fills one)."""

    offset: int
    reason: str = "end of data"
    corrupt: bool = False


class RecoveryWalk:
    """Recovery of a :class:`~store.commitlog.commitlog.CommitLog` (a mixin: it works on the
    log's file queue and its record walk)."""

    queue: MappedFileQueue
    last_recovery: RecoveryResult | None

    if TYPE_CHECKING:
        # Defined by CommitLog.
        def read(self, offset: int, size: int) -> bytes | None: ...
        def _runs(
            self, from_offset: int, check_crc: bool, stop: ScanStop, until_file: int | None = None
        ) -> Iterator[tuple[int, bytes, RecordRun]]: ...

    def recover_normally(self, check_crc: bool, dispatched: tuple[int, int] | None = None) -> int:
        """After a clean shutdown: check from the 3rd-last file on, truncate after the last
        valid record; returns the valid end offset (see :attr:`last_recovery`).

        ``dispatched`` is ``(offset, size)`` of the last record the ConsumeQueues point at
        (RocketMQ 5's ``dispatchFromPhyOffset``): when that record checks out, the walk starts
        there instead, so a clean open costs O(1) rather than up to three files."""
        files = self.queue.files
        start = files[max(0, len(files) - 3)].start_offset if files else self.queue.max_offset
        if dispatched is not None and dispatched[0] >= start and self._is_record(*dispatched, check_crc):
            start = dispatched[0]
        return self._recover(start, check_crc)

    def _is_record(self, offset: int, size: int, check_crc: bool) -> bool:
        """True when a complete, valid record of ``size`` bytes starts at ``offset``."""
        raw = self.read(offset, size)
        if raw is None:
            return False
        check = check_record(raw, 0, check_crc)
        return check.status is RecordStatus.OK and check.size == size

    def recover_abnormally(self, min_timestamp_ms: int, check_crc: bool) -> int:
        """After a crash: check from :meth:`abnormal_start`, truncate after the last valid record."""
        return self.recover_from(self.abnormal_start(min_timestamp_ms), check_crc)

    def abnormal_start(self, min_timestamp_ms: int) -> int:
        """Where a check after a crash starts: the newest file whose first record was stored at
        or before ``min_timestamp_ms`` (the checkpoint's), else the first file."""
        files = self.queue.files
        start = files[0].start_offset if files else self.queue.max_offset
        for mapped in reversed(files):
            first = first_store_timestamp(mapped)
            if first is not None and first <= min_timestamp_ms:
                start = mapped.start_offset
                break
        return start

    def recover_from(
        self,
        start: int,
        check_crc: bool,
        *,
        on_batch: Callable[[DispatchBatch], None] | None = None,
        max_records: int = 4096,
        tags_codes_for: TagsCodesFn = default_tags_codes,
    ) -> int:
        """Check the records from ``start``, truncate after the last valid one and return its
        end (see :attr:`last_recovery`). ``on_batch`` receives every record that checked out,
        in order, as DispatchBatches of at most ``max_records``, while the walk goes on (the
        one pass of an abnormal recovery: the records are parsed once)."""
        return self._recover(start, check_crc, on_batch, max_records, tags_codes_for)

    def _recover(
        self,
        start: int,
        check_crc: bool,
        on_batch: Callable[[DispatchBatch], None] | None = None,
        max_records: int = 4096,
        tags_codes_for: TagsCodesFn = default_tags_codes,
    ) -> int:
        stop = ScanStop(start)
        for base, chunk, run in self._runs(start, check_crc, stop):
            if on_batch is not None:
                for lo in range(0, len(run), max_records):
                    hi = min(lo + max_records, len(run))
                    on_batch(run_dispatch_batch(base, chunk, run, lo, hi, tags_codes_for))
        end = stop.offset
        mapped = self.queue.find_file(end) or self.queue.last_file()
        where = mapped.path if mapped is not None else self.queue.directory
        if stop.corrupt:
            log.warning(
                "commitlog recovery: truncating %s at offset %d (position %d): %s",
                where,
                end,
                end - (mapped.start_offset if mapped is not None else 0),
                stop.reason,
            )
        else:
            log.info("commitlog recovery: valid data ends in %s at offset %d (%s)", where, end, stop.reason)
        self.queue.truncate(end, reason=f"recovery: {stop.reason}")
        self.last_recovery = RecoveryResult(start, end, stop.reason)
        return end


def first_store_timestamp(mapped: MappedFile) -> int | None:
    """STORETIMESTAMP of a file's first record (None if it does not start with one)."""
    head = mapped.read(0, RECORD_HEADER.size)
    if len(head) < RECORD_HEADER.size:
        return None
    header = RecordHeader._make(RECORD_HEADER.unpack(head))
    if header.magic not in (MAGIC_V1, MAGIC_V2) or header.store_timestamp == 0:
        return None
    return int(header.store_timestamp)
