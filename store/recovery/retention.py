"""Retention: deleting expired CommitLog files, then the derived files below the new minimum.

RocketMQ's ``CleanCommitLogService``: files last written more than ``file_reserved_time_hours``
ago are deleted at the ``delete_when_hours`` hours, at any hour when forced, or when the disk
is fuller than ``disk_max_used_ratio`` (then even unexpired files go, oldest first). The file
being written is never deleted. ConsumeQueue and index files wholly below the CommitLog's new
minimum offset follow, and every queue's minimum offset is corrected.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable

from store.commitlog.commitlog import CommitLog
from store.config import StoreConfig
from store.consumequeue.queue_store import ConsumeQueueStore
from store.index.index_service import IndexService

log = logging.getLogger("sparkmq.store")


def delete_expired(
    config: StoreConfig,
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    index: IndexService | None,
    now_ms: int,
    *,
    force: bool = False,
    before_delete: Callable[[int], None] | None = None,
) -> int:
    """Apply the retention rule at ``now_ms``; returns the number of CommitLog files deleted.
    ``before_delete(end)`` runs first when files below CommitLog offset ``end`` are about to
    go (the offset table keeps what they hold); when it raises, nothing is deleted."""
    hour = time.gmtime(now_ms / 1000).tm_hour
    disk_full = disk_used_ratio(config.store_dir) > config.disk_max_used_ratio
    if not (force or disk_full or hour in config.delete_when_hours):
        return 0
    expired_before = now_ms - int(config.file_reserved_time_hours * 3_600_000)
    if before_delete is not None:
        end = commitlog.expired_end(expired_before, force=disk_full)
        if end > commitlog.min_offset:
            before_delete(end)
    deleted = commitlog.delete_expired_files(expired_before, force=disk_full)
    if deleted:
        low = commitlog.min_offset
        queues.delete_files_below(low)
        queues.correct_min_offsets(low)
        if index is not None:
            index.delete_files_below(low)
        log.info("retention deleted %d commitlog file(s); min offset is now %d", deleted, low)
    return deleted


def disk_used_ratio(path: os.PathLike[str] | str) -> float:
    """Used / total bytes of the file system holding ``path``."""
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0
