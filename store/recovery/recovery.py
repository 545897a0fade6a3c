"""Store recovery: one linear procedure, run by :meth:`MessageStore.open`.

1. No ``abort`` file (clean shutdown): check the CommitLog from its 3rd-last file.
   ``abort`` present (crash): check from the newest file whose first message was stored at or
   before ``checkpoint.min_timestamp`` (min(physic, logics) - 3 s), verifying body CRCs, and
   delete index files newer than the checkpoint's index timestamp.
2. Truncate the CommitLog after the last valid record (logged with file, offset and reason).
3. Recover every ConsumeQueue, drop units pointing at or past the valid end.
4. Re-dispatch the CommitLog from where the derived structures stop: ConsumeQueue units and
   index entries already present are skipped (both dispatches are idempotent).

The CommitLog is the only truth: if a ConsumeQueue cannot be reconciled (a gap), every
ConsumeQueue is rebuilt from the CommitLog instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from store.commitlog.commitlog import CommitLog
from store.consumequeue.queue_store import ConsumeQueueStore
from store.errors import InvalidArgument
from store.format.batch_encode import I32, I64
from store.index.index_service import IndexService
from store.metadata.checkpoint import StoreCheckpoint
from store.write.message_builder import tags_codes_for

log = logging.getLogger("sparkmq.store")


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
        log.warning("store was not shut down cleanly (abort file present): abnormal recovery")
        end = commitlog.recover_abnormally(checkpoint.min_timestamp_ms(), check_crc)
        if index is not None:
            dropped = index.destroy_newer_than(checkpoint.values.index_msg_timestamp_ms)
            if dropped:
                log.warning("abnormal recovery: deleted %d index file(s) newer than the checkpoint", dropped)
    else:
        queues.recover()
        end = commitlog.recover_normally(check_crc, dispatched=_last_dispatched(queues))
    last = commitlog.last_recovery
    check_from = last.start_offset if last is not None else commitlog.min_offset
    reason = last.reason if last is not None else "empty"

    queues.recover()
    queues.truncate_dirty(end)
    cq_from = queues.max_commitlog_end()
    if abnormal:
        cq_from = min(cq_from, check_from)
    index_from = end if index is None else _end_of_record(commitlog, index.last_indexed_offset())
    dispatch_from = max(commitlog.min_offset, min(cq_from, index_from))

    rebuilt = False
    try:
        replayed = _dispatch(commitlog, queues, index, dispatch_from, delay_levels)
    except InvalidArgument as exc:
        log.warning("ConsumeQueues cannot be reconciled with the CommitLog (%s): rebuilding them all", exc)
        queues.destroy()
        dispatch_from = commitlog.min_offset
        replayed = _dispatch(commitlog, queues, index, dispatch_from, delay_levels)
        rebuilt = True
    if replayed:
        log.info("recovery re-dispatched %d record(s) from offset %d", replayed, dispatch_from)
    return RecoveryReport(abnormal, check_from, end, reason, dispatch_from, replayed, rebuilt)


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
    return _dispatch(commitlog, queues, index, commitlog.min_offset, delay_levels)


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
    index: IndexService | None,
    from_offset: int,
    delay_levels: tuple[int, ...],
) -> int:
    def codes(topics: tuple[str, ...], topic_codes: I32, queue_ids: I32, store_ts: I64, hashes: I64) -> I64:
        return tags_codes_for(topics, topic_codes, queue_ids, store_ts, hashes, delay_levels)

    replayed = 0
    for batch in commitlog.scan(from_offset, check_crc=False, tags_codes_for=codes):
        queues.dispatch(batch)
        if index is not None:
            index.dispatch(batch)
        replayed += len(batch)
    return replayed
