"""Store recovery: one linear procedure, run by :meth:`MessageStore.open`.

No ``abort`` file (clean shutdown):

1. Recover every ConsumeQueue; check the CommitLog from its 3rd-last file (or from the last
   record the ConsumeQueues point at) and truncate it after the last valid record (logged
   with file, offset and reason); drop ConsumeQueue units pointing at or past that end.
2. Re-dispatch the CommitLog from where the derived structures stop: ConsumeQueue units and
   index entries already present are skipped (both dispatches are idempotent).

``abort`` present (crash), in one pass over the CommitLog, as RocketMQ's
``recoverAbnormally`` dispatches while it checks:

1. Delete index files newer than the checkpoint's index timestamp; recover every ConsumeQueue.
2. The check starts at the newest file whose first message was stored at or before
   ``checkpoint.min_timestamp`` (min(physic, logics) - 3 s); re-dispatch the files before it
   from where the derived structures stop.
3. Check the records from there on, body CRCs included, dispatching each run that checks out
   as the walk goes; truncate the CommitLog after the last valid record (logged); drop
   ConsumeQueue units pointing at or past that end (units of valid records were kept or
   re-dispatched: dispatch skips units already present).

The CommitLog is the only truth: if a ConsumeQueue cannot be reconciled (a gap), every
ConsumeQueue is rebuilt from the CommitLog instead.

On a full disk the key index may not be able to grow (a new file's slot table, a page of
entries): recovery then stops indexing at the first batch it could not take and reports it
(``index_behind_from``); the store hands the rest to its index thread, which retries until
space returns (lookups that need the index wait meanwhile, as after any index failure).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

from store.commitlog.commitlog import CommitLog, TagsCodesFn
from store.commitlog.dispatch_batch import DispatchBatch
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import InvalidArgument
from store.format.batch_encode import I32, I64
from store.index.index_service import IndexService
from store.metadata.checkpoint import StoreCheckpoint
from store.write.message_builder import tags_codes_for

log = logging.getLogger("sparkmq.store")

#: Records per dispatch batch while replaying (a scan chunk holds ~20,000 of 200 bytes): large
#: batches amortise the per-batch work of the ConsumeQueue and index builders.
DISPATCH_BATCH_RECORDS = 1 << 16


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    abnormal: bool
    #: Where the CommitLog check started and where valid data ends.
    check_from_offset: int
    end_offset: int
    reason: str
    #: Where re-dispatch started and how many records it replayed.
    dispatch_from_offset: int
    records_dispatched: int
    consume_queues_rebuilt: bool
    #: CommitLog offset from which the index could not be built (a full disk), else None.
    index_behind_from: int | None = None


class _IndexFeed:
    """Feeds recovery's batches to the index until one fails with an I/O error (a full disk):
    from then on nothing more is indexed here and ``behind_from`` says where to resume."""

    def __init__(self, index: IndexService | None) -> None:
        self.index = index
        self.behind_from: int | None = None

    def __call__(self, batch: DispatchBatch) -> None:
        if self.index is None or self.behind_from is not None or len(batch) == 0:
            return
        try:
            self.index.dispatch(batch)
        except OSError as exc:
            self.behind_from = int(batch.commitlog_offsets[0])
            log.error("recovery could not index from offset %d (%s): resumed later", self.behind_from, exc)


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    *,
    abnormal: bool,
    check_crc: bool,
    delay_levels: tuple[int, ...],
) -> RecoveryReport:
    if abnormal:
        return _recover_abnormally(commitlog, queues, index, checkpoint, check_crc, delay_levels)
    queues.recover()
    end = commitlog.recover_normally(check_crc, dispatched=_last_dispatched(queues))
    last = commitlog.last_recovery
    check_from = last.start_offset if last is not None else commitlog.min_offset
    reason = last.reason if last is not None else "empty"

    queues.recover()
    queues.truncate_dirty(end)
    cq_from = queues.max_commitlog_end()
    index_from = end if index is None else _end_of_record(commitlog, index.last_indexed_offset())
    dispatch_from = max(commitlog.min_offset, min(cq_from, index_from))

    rebuilt = False
    feed = _IndexFeed(index)
    try:
        replayed = _dispatch(commitlog, queues, feed, dispatch_from, delay_levels)
    except InvalidArgument as exc:
        log.warning("ConsumeQueues cannot be reconciled with the CommitLog (%s): rebuilding them all", exc)
        queues.destroy()
        dispatch_from = commitlog.min_offset
        feed = _IndexFeed(index)
        replayed = _dispatch(commitlog, queues, feed, dispatch_from, delay_levels)
        rebuilt = True
    if replayed:
        log.info("recovery re-dispatched %d record(s) from offset %d", replayed, dispatch_from)
    behind = feed.behind_from
    return RecoveryReport(abnormal, check_from, end, reason, dispatch_from, replayed, rebuilt, behind)


def _recover_abnormally(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    checkpoint: StoreCheckpoint,
    check_crc: bool,
    delay_levels: tuple[int, ...],
) -> RecoveryReport:
    log.warning("store was not shut down cleanly (abort file present): abnormal recovery")
    if index is not None:
        dropped = index.destroy_newer_than(checkpoint.values.index_msg_timestamp_ms)
        if dropped:
            log.warning("abnormal recovery: deleted %d index file(s) newer than the checkpoint", dropped)
    queues.recover()
    check_from = commitlog.abnormal_start(checkpoint.min_timestamp_ms())
    cq_from = min(queues.max_commitlog_end(), check_from)
    index_from = check_from if index is None else _end_of_record(commitlog, index.last_indexed_offset())
    dispatch_from = max(commitlog.min_offset, min(cq_from, index_from))

    replay = _Replay(queues, _IndexFeed(index))
    codes = _tags_codes(delay_levels)
    for batch in commitlog.scan(
        dispatch_from, max_records=DISPATCH_BATCH_RECORDS, tags_codes_for=codes, until_file=check_from
    ):
        replay(batch)
    end = commitlog.recover_from(
        check_from, check_crc, on_batch=replay, max_records=DISPATCH_BATCH_RECORDS, tags_codes_for=codes
    )
    queues.truncate_dirty(end)
    last = commitlog.last_recovery
    reason = last.reason if last is not None else "empty"
    replayed = replay.records
    if replay.gap is not None:
        log.warning(
            "ConsumeQueues cannot be reconciled with the CommitLog (%s): rebuilding them all", replay.gap
        )
        queues.destroy()
        dispatch_from = commitlog.min_offset
        replay.index = _IndexFeed(index)
        replayed = _dispatch(commitlog, queues, replay.index, dispatch_from, delay_levels)
    if replayed:
        log.info("recovery re-dispatched %d record(s) from offset %d", replayed, dispatch_from)
    rebuilt = replay.gap is not None
    return RecoveryReport(
        True, check_from, end, reason, dispatch_from, replayed, rebuilt, replay.index.behind_from
    )


class _Replay:
    """Dispatches batches to the ConsumeQueues and the index until a ConsumeQueue cannot take
    one (a gap): then ``gap`` says why and the rest is left to a rebuild."""

    def __init__(self, queues: ConsumeQueueStore, index: _IndexFeed) -> None:
        self.queues = queues
        self.index = index
        self.records = 0
        self.gap: str | None = None

    def __call__(self, batch: DispatchBatch) -> None:
        if self.gap is not None:
            return
        try:
            self.queues.dispatch(batch)
        except InvalidArgument as exc:
            self.gap = str(exc)
            return
        self.index(batch)
        self.records += len(batch)


def _tags_codes(delay_levels: tuple[int, ...]) -> TagsCodesFn:
    def codes(topics: tuple[str, ...], topic_codes: I32, queue_ids: I32, store_ts: I64, hashes: I64) -> I64:
        return tags_codes_for(topics, topic_codes, queue_ids, store_ts, hashes, delay_levels)

    return codes


def rebuild_derived(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    delay_levels: tuple[int, ...],
) -> int:
    """Destroy every ConsumeQueue and index file and rebuild them from the CommitLog."""
    queues.destroy()
    if index is not None:
        index.destroy()
    replayed = 0
    for batch in index_catch_up(commitlog, commitlog.min_offset, delay_levels):
        queues.dispatch(batch)
        if index is not None:
            index.dispatch(batch)
        replayed += len(batch)
    return replayed


def index_catch_up(
    commitlog: CommitLog, from_offset: int, delay_levels: tuple[int, ...]
) -> Iterator[DispatchBatch]:
    """The CommitLog's records from ``from_offset`` on as dispatch batches (lazily)."""
    return commitlog.scan(
        from_offset,
        check_crc=False,
        max_records=DISPATCH_BATCH_RECORDS,
        tags_codes_for=_tags_codes(delay_levels),
    )


def _last_dispatched(queues: ConsumeQueueStore) -> tuple[int, int] | None:
    """``(offset, size)`` of the furthest CommitLog record any ConsumeQueue points at."""
    best: tuple[int, int] | None = None
    for queue in queues.queues().values():
        unit = queue.get_unit(queue.max_offset - 1)
        if unit is not None and (best is None or unit[0] + unit[1] > best[0] + best[1]):
            best = (unit[0], unit[1])
    return best


def _end_of_record(commitlog: CommitLog, offset: int) -> int:
    """Offset just after the record at ``offset`` (the CommitLog start when ``offset`` < 0)."""
    if offset < 0:
        return commitlog.min_offset
    head = commitlog.read(offset, 4)
    return offset + int.from_bytes(head, "big") if head else commitlog.min_offset


def _dispatch(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: _IndexFeed,
    from_offset: int,
    delay_levels: tuple[int, ...],
) -> int:
    replayed = 0
    for batch in index_catch_up(commitlog, from_offset, delay_levels):
        queues.dispatch(batch)
        index(batch)
        replayed += len(batch)
    return replayed
