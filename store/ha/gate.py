"""``ReplicaGate``: the replication hooks a replica's put path calls, whatever its role.

Installed once (:meth:`ReplicaLog.set_hooks`); a role change swaps what it delegates to with
one assignment and no lock, so :meth:`ReplicaController.fence` refuses the next write and the
next acknowledgement at once, even while the put lock is held elsewhere. A master delegates to
its :class:`~store.ha.master.MasterSession`; every other role refuses with the exception the
controller set (NotMaster for a slave or a replica without a role, ReplicaFenced when fenced).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from store.errors import NotMaster, StoreNotWritable

if TYPE_CHECKING:
    from store.ha.master import MasterSession

Refusal = Callable[[], StoreNotWritable]


class ReplicaGate:
    """Implements :class:`store.write.replication.ReplicationHooks` for a replica."""

    def __init__(self) -> None:
        self._session: MasterSession | None = None
        self._refusal: Refusal = lambda: NotMaster("not the master: this replica has no role yet")

    def open_for(self, session: MasterSession) -> None:
        """Writes go to ``session`` (this replica is its master)."""
        self._session = session

    def refuse(self, refusal: Refusal) -> None:
        """From now on every write and every pending acknowledgement raises ``refusal()``."""
        self._refusal = refusal
        self._session = None

    def check_writable(self) -> None:
        session = self._session
        if session is None:
            raise self._refusal()
        session.check_writable()

    def appended(self, end_offset: int) -> None:
        session = self._session
        if session is not None:
            session.appended(end_offset)

    def acknowledge(self, end_offset: int) -> None:
        session = self._session
        if session is None:
            raise self._refusal()
        session.acknowledge(end_offset)
