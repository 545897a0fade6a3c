"""Truncating a replica's log: one procedure, crash-safe, run before the new end is reported.

RocketMQ truncates a rejoining slave at the consistent point (``AutoSwitchHAClient.doTruncate``,
lines 432-476) and a new master's incomplete tail (``AutoSwitchHAService.truncateInvalidMsg``,
lines 492-540) by resetting in-memory positions only; a crash right after can bring the cut
tail back (apache/rocketmq#10666). Here every step is durable before the next starts, and the
caller reports the new end (to the master, or by taking writes) only after the last one:

1. **CommitLog**: the file holding the point is zeroed from it (written and msync'ed: the
   fixed-size file stays mapped by readers, so it is not shrunk), later files are unlinked and
   the directory is fsynced.
2. **ConsumeQueues**: units of records ending beyond the point are dropped; the cut files are
   msync'ed and their directories fsynced.
3. **Index**: index files holding entries at or beyond the point are deleted (directory
   fsynced) and the records before the point they held are indexed again.
4. **Checkpoint**: its confirm offset is at most the point and no timestamp is later than the
   newest record kept; fsynced.
5. **Epoch file**: entries starting at or beyond the point are removed (atomic rewrite).
6. **Memory**: next queue offsets, remembered idempotent results and the valid end follow.

A crash between steps leaves a log that recovery and :meth:`EpochFile.reconcile` finish
cutting: ConsumeQueue units past the CommitLog's end are dropped at open, epoch entries
starting past it at the replication layer's start. All of it runs under the put lock with the
index thread idle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from store.errors import InvalidArgument
from store.ha.epoch_file import EpochEntry, EpochFile
from store.write.replica_log import ReplicaLog

log = logging.getLogger("sparkmq.ha")


@dataclass(frozen=True, slots=True)
class TruncationReport:
    """What one truncation did."""

    point: int
    #: CommitLog bytes dropped (the old max offset minus the point).
    dropped_bytes: int
    dropped_epochs: tuple[EpochEntry, ...]
    reindexed_records: int
    reason: str


def truncate_replica(replica: ReplicaLog, epochs: EpochFile, point: int, reason: str) -> TruncationReport:
    """Cut the replica's log, derived structures and epoch file at CommitLog offset ``point``
    (see the module docstring); returns when all of it is durable.

    Raises :class:`InvalidArgument` when ``point`` is not a record boundary or lies beyond the
    valid end (nothing changed), :class:`~store.errors.IndexBehind` when the index thread does
    not go idle, and OSError when a step fails (the steps before it are durable; truncating
    again finishes the job).
    """
    with replica.exclusive():
        old_end = replica.max_offset
        if point > replica.dispatched_to or not replica.is_record_boundary(point):
            raise InvalidArgument(
                f"cannot truncate at {point}: not a record boundary of the log "
                f"(valid end {replica.dispatched_to}, max offset {old_end})"
            )
        log.warning(
            "truncating the replica's log at %d (max offset %d, %d bytes): %s",
            point,
            old_end,
            old_end - point,
            reason,
        )
        replica.cut_commitlog(point, reason)
        replica.cut_consume_queues(point)
        reindexed = replica.cut_index(point)
        replica.fix_checkpoint(point)
        dropped = epochs.truncate_suffix_by_offset(point)
        replica.forget_beyond(point)
    return TruncationReport(point, old_end - point, dropped, reindexed, reason)
