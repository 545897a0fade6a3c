"""The facade's replication role: what :mod:`store.ha` drives (the replica log, the confirm
offset readers are bounded by, appends of the master's bytes)."""

from __future__ import annotations

from store.facade.base import FacadeState
from store.write.replica_log import ReplicaLog


class Replication(FacadeState):
    """A replica group member's side of the store (a role of
    :class:`~store.message_store.MessageStore`)."""

    # ------------------------------------------------------------------ replication
    @property
    def replicated(self) -> bool:
        """Member of a replica group (``StoreConfig.replicated``)."""
        return self.config.replicated

    @property
    def confirm_offset(self) -> int:
        """The CommitLog offset readers are bounded by: every in-sync replica holds the records
        ending at or below it. A lone store: its max offset (no bound)."""
        bound = self._visibility.bound
        return self._commitlog.max_offset if bound is None else bound

    def replica_log(self) -> ReplicaLog:
        """The store as the replication layer works it (:class:`store.ha.ReplicaController`
        takes it): raw CommitLog reads and appends, the confirm offset, the put path's hooks,
        the steps of a truncation."""
        self._ensure_open()
        return self._replica_log

    def append_replicated(self, offset: int, data: bytes | bytearray | memoryview) -> int:
        """Append raw CommitLog bytes received from the master exactly at the local max offset
        and dispatch the records they complete through the normal dispatch (the queue offsets
        are the master's); returns the new max offset. Raises ``ReplicationGap`` (nothing
        written) or ``ReplicatedDataCorrupt`` (see :meth:`ReplicaLog.append_replicated`)."""
        self._ensure_open()
        return self._replica_log.append_replicated(offset, data)
