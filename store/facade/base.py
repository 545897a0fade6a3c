"""The state every role of the :class:`~store.message_store.MessageStore` facade shares.

The facade is one class assembled from one mixin per role (:mod:`store.facade.writes`,
:mod:`~store.facade.reads`, :mod:`~store.facade.groups`, :mod:`~store.facade.admin`,
:mod:`~store.facade.replication`); :class:`FacadeState` declares the components they all
work on (created by ``MessageStore._open``) and the checks they all make. A mixin never
holds state of its own and is never used alone.

The few methods one role calls on another are declared here for the type checker only
(under ``TYPE_CHECKING``), so at run time every name resolves to exactly one definition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from store.errors import StoreClosed, UnknownQueue, UnknownTopic

if TYPE_CHECKING:
    from collections.abc import Callable

    from store.commitlog.commitlog import CommitLog
    from store.commitlog.group_commit import GroupCommitService
    from store.config import StoreConfig
    from store.consumequeue.queue_store import ConsumeQueueStore
    from store.index.index_service import IndexDispatcher, IndexService
    from store.io.clock import Clock
    from store.io.fs import FileSystem
    from store.io.lock import DirectoryLock
    from store.metadata.checkpoint import StoreCheckpoint
    from store.metadata.offset_table import ConsumerOffsetTable, DelayOffsetTable
    from store.metadata.topic_config import TopicConfigTable
    from store.read.queue_reader import QueueReader
    from store.recovery.recovery import RecoveryReport
    from store.services import PeriodicService
    from store.types import StoreStats
    from store.write.appender import Appender
    from store.write.arrivals import Arrivals
    from store.write.offset_log import OffsetLog
    from store.write.relocator import Relocator
    from store.write.replica_log import ReplicaLog
    from store.write.visibility import Visibility


class FacadeState:
    """The components of an open store, and the argument checks every role makes."""

    config: StoreConfig
    delay_levels: tuple[int, ...]
    recovery: RecoveryReport | None
    _clock: Clock
    _fs: FileSystem
    _store_host: tuple[str, int]
    _lock: DirectoryLock
    _closed: bool
    _services: list[PeriodicService]
    _group_commit: GroupCommitService | None
    _index_dispatcher: IndexDispatcher | None
    _arrivals: Arrivals
    _checkpoint: StoreCheckpoint
    _commitlog: CommitLog
    _queues: ConsumeQueueStore
    _index: IndexService | None
    _topics: TopicConfigTable
    _offsets: ConsumerOffsetTable
    _delay_offsets: DelayOffsetTable
    _offset_log: OffsetLog
    _retention_listeners: list[Callable[[int], None]]
    _visibility: Visibility
    _reader: QueueReader
    _appender: Appender
    _replica_log: ReplicaLog
    _relocator: Relocator

    if TYPE_CHECKING:
        # Defined by one role, called by another (see the module docstring).
        def queue_offsets(self, topic: str) -> dict[int, tuple[int, int]]: ...  # reads
        def wait_indexed(self, timeout_s: float = 10.0) -> bool: ...  # reads
        def stats(self) -> StoreStats: ...  # admin

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"store {self.config.store_dir} is closed")

    def queue_count(self, topic: str) -> int:
        tc = self._topics.get(topic)
        if tc is None:
            raise UnknownTopic(f"unknown topic {topic!r}")
        return tc.queues

    def _has_queue(self, topic: str, queue_id: int) -> bool:
        tc = self._topics.get(topic)
        return tc is not None and 0 <= queue_id < tc.queues

    def _require_queue(self, topic: str, queue_id: int) -> None:
        count = self.queue_count(topic)
        if not 0 <= queue_id < count:
            raise UnknownQueue(f"queue {queue_id} does not exist: topic {topic!r} has {count} queues")
