"""The put path's seam to replication: may this store write, and when is a write acknowledged.

The :class:`~store.write.appender.Appender` calls a :class:`ReplicationHooks` (when one is
installed) at three points of every put, whatever its entry (messages, columns, relocations,
records encoded elsewhere)::

    check_writable()      before anything is validated against the store or appended, and
                          again under the put lock: raises NotMaster / ReplicaFenced /
                          SlaveNotAvailable; nothing is written then
    appended(end_offset)  under the put lock, right after the CommitLog append and dispatch:
                          wakes the replication senders (must not block)
    acknowledge(end)      after the put lock (and after SYNC_FLUSH's group commit): returns
                          when the write may be reported as a success, raises
                          FlushSlaveTimeout / SlaveNotAvailable / ReplicaFenced otherwise

An idempotent retry that finds its messages stored already is acknowledged the same way, so a
write whose acknowledgement was refused is never reported as a success until it is replicated.

A lone store has no hooks (nothing changes); a replicated store starts with :class:`Standby`
until the replication layer (:mod:`store.ha`) gives it a role.
"""

from __future__ import annotations

from typing import Protocol

from store.errors import NotMaster


class ReplicationHooks(Protocol):
    def check_writable(self) -> None:
        """Raise when this store must not take a write now (nothing written)."""
        ...

    def appended(self, end_offset: int) -> None:
        """Records now end at ``end_offset`` (called under the put lock; do not block)."""
        ...

    def acknowledge(self, end_offset: int) -> None:
        """Block until a write ending at ``end_offset`` may be acknowledged, or raise."""
        ...


class Standby:
    """A replica without a role yet (or between roles): refuses every write."""

    def __init__(self, why: str = "this replica has no role yet") -> None:
        self.why = why

    def check_writable(self) -> None:
        raise NotMaster(f"not the master: {self.why}")

    def appended(self, end_offset: int) -> None:
        return None

    def acknowledge(self, end_offset: int) -> None:
        raise NotMaster(f"not the master: {self.why}")
