"""Store configuration: one frozen, validated dataclass.

Defaults follow RocketMQ's ``MessageStoreConfig`` (see docs/design.md); units are in the
field names. Environment variables and CLI flags are read only at the edges (``sparkmq.cli``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from pathlib import Path

from store.errors import InvalidArgument

GIB = 1 << 30
MIB = 1 << 20

#: RocketMQ's ``messageDelayLevel`` default: level N (1-based) waits DELAY_LEVELS[N-1].
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


@dataclass(frozen=True)
class StoreConfig:
    """Everything the store needs to know, validated by :meth:`validate`.

    ``store_dir`` is the root (RocketMQ's ``storePathRootDir``); the layout below it is
    RocketMQ's: ``commitlog/``, ``consumequeue/``, ``index/``, ``config/``, ``checkpoint``,
    ``abort``, ``lock``.
    """

    store_dir: Path
    #: Size of every CommitLog file; file names are their 20-digit start offsets.
    commitlog_file_size_bytes: int = GIB
    #: ConsumeQueue units (20 bytes each) per file.
    consume_queue_units_per_file: int = 300_000
    #: IndexFile hash slots and entries per file.
    index_hash_slots: int = 5_000_000
    index_max_entries: int = 20_000_000
    #: Build the key index (RocketMQ ``messageIndexEnable``).
    index_enabled: bool = True
    #: How long a lookup that must see every acknowledged write (a key query, an idempotent
    #: retry, a sink resume) waits for the index thread before it is refused (``IndexBehind``).
    index_lookup_wait_ms: int = 10_000

    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    #: ASYNC_FLUSH period for the CommitLog (``flushIntervalCommitLog``).
    flush_interval_ms: int = 500
    #: ConsumeQueue / index flush period (``flushIntervalConsumeQueue``).
    flush_consume_queue_interval_ms: int = 1000
    #: SYNC_FLUSH: a put fails with FlushTimeout if fsync takes longer (``syncFlushTimeout``).
    sync_flush_timeout_ms: int = 5000
    #: How often consumer/delay offsets are persisted (``flushConsumerOffsetInterval``).
    offset_persist_interval_ms: int = 5000

    #: Largest accepted body (``maxMessageSize``).
    max_message_size_bytes: int = 4 * MIB
    #: Bodies larger than this are stored zlib-compressed (``compressMsgBodyOverHowmuch``).
    compress_body_over_bytes: int = 4096
    compress_level: int = 5

    #: Queues of an auto-created or default topic (``defaultTopicQueueNums``).
    default_queues_per_topic: int = 8
    auto_create_topics: bool = True

    #: Retention: CommitLog files older than this are deleted (``fileReservedTime``).
    file_reserved_time_hours: float = 72.0
    #: Hours of day (0-23, UTC) when expired files are deleted (``deleteWhen`` "04").
    delete_when_hours: tuple[int, ...] = (4,)
    #: Disk use ratio above which expired-or-not files are deleted oldest first.
    disk_max_used_ratio: float = 0.75
    #: How often the retention check runs.
    clean_interval_ms: int = 10_000

    #: Reserve each new CommitLog file's full size on disk when it is created (otherwise files
    #: are sparse and use disk as they fill).
    preallocate_files: bool = False

    #: Verify body CRCs while recovering (``checkCRCOnRecover``).
    check_crc_on_recover: bool = True

    #: Store host written into records and msg ids (IPv4 + port).
    store_host: str = "127.0.0.1"
    store_port: int = 10911

    delay_levels: str = DEFAULT_DELAY_LEVELS
    #: Timer messages (RocketMQ 5): the furthest delivery time accepted (``timerMaxDelaySec``,
    #: 3 days) and the precision delivery times are rounded up to (``timerPrecisionMs``).
    timer_max_delay_ms: int = 3 * 86_400_000
    timer_precision_ms: int = 1000

    #: Member of a replica group (:mod:`store.ha`): producers are refused until the replication
    #: layer makes this store the master, and readers see only the records that end at or
    #: below the confirm offset (what every in-sync replica holds). False: a lone broker, every
    #: record visible at once, nothing changes.
    replicated: bool = False

    #: Run background services (flush, index dispatch, retention). Tests may turn them off
    #: and drive :class:`~store.message_store.MessageStore` explicitly.
    background_services: bool = True

    extra: dict[str, str] = field(default_factory=dict, compare=False)

    def validate(self) -> StoreConfig:
        """Return ``self`` or raise :class:`InvalidArgument` naming the bad field."""
        checks: list[tuple[bool, str]] = [
            (self.commitlog_file_size_bytes >= 4096, "commitlog_file_size_bytes must be >= 4096"),
            (self.consume_queue_units_per_file >= 1, "consume_queue_units_per_file must be >= 1"),
            (self.index_hash_slots >= 1, "index_hash_slots must be >= 1"),
            (self.index_max_entries >= 2, "index_max_entries must be >= 2"),
            (self.index_lookup_wait_ms > 0, "index_lookup_wait_ms must be > 0"),
            (self.flush_interval_ms > 0, "flush_interval_ms must be > 0"),
            (self.flush_consume_queue_interval_ms > 0, "flush_consume_queue_interval_ms must be > 0"),
            (self.sync_flush_timeout_ms > 0, "sync_flush_timeout_ms must be > 0"),
            (0 < self.max_message_size_bytes <= 64 * MIB, "max_message_size_bytes must be in (0, 64 MiB]"),
            (self.compress_body_over_bytes >= 0, "compress_body_over_bytes must be >= 0"),
            (0 <= self.compress_level <= 9, "compress_level must be in [0, 9]"),
            (1 <= self.default_queues_per_topic <= 1024, "default_queues_per_topic must be in [1, 1024]"),
            (self.file_reserved_time_hours > 0, "file_reserved_time_hours must be > 0"),
            (all(0 <= h <= 23 for h in self.delete_when_hours), "delete_when_hours must be in [0, 23]"),
            (0.0 < self.disk_max_used_ratio <= 1.0, "disk_max_used_ratio must be in (0, 1]"),
            (0 < self.store_port < 65536, "store_port must be in (0, 65536)"),
            (self.timer_max_delay_ms > 0, "timer_max_delay_ms must be > 0"),
            (0 < self.timer_precision_ms <= 60_000, "timer_precision_ms must be in (0, 60000]"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(f"invalid StoreConfig: {message}")
        return self

    def with_changes(self, **changes: object) -> StoreConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]

    # Derived paths -------------------------------------------------------------------------
    @property
    def commitlog_dir(self) -> Path:
        return self.store_dir / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_dir / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_dir / "index"

    @property
    def config_dir(self) -> Path:
        return self.store_dir / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_dir / "abort"

    @property
    def lock_path(self) -> Path:
        return self.store_dir / "lock"
