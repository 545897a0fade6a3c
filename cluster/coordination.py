"""The seam between the cluster layer and its coordination engine.

:class:`Coordination` is the small set of primitives the cluster needs from ZooKeeper: a
session whose end removes ephemeral nodes, versioned (compare-and-set) writes, all-or-nothing
transactions guarded by version checks, and watches. :mod:`cluster.zk` implements it with
kazoo; another engine (etcd: leases, ``mod_revision``, Txn) could implement it without
touching the callers. Paths are relative to the cluster's root (the ``--cluster`` chroot).

Errors are the named exceptions below, never the engine's own.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cluster.errors import ClusterError, CoordinationUnavailable


class SessionState(enum.StrEnum):
    """ZooKeeper's session as the broker sees it (kazoo's CONNECTED / SUSPENDED / LOST)."""

    #: Commands run; the session and its ephemeral nodes are alive.
    CONNECTED = "connected"
    #: The connection is down; the session may still be alive on the server. A master stops
    #: acknowledging here (it cannot know whether another has been elected).
    SUSPENDED = "suspended"
    #: The session expired (or was never established): ephemeral nodes are gone.
    LOST = "lost"


class NodeExists(ClusterError):
    code = "node_exists"


class NoNode(ClusterError):
    code = "no_node"


class VersionConflict(ClusterError):
    """A versioned write or a transaction's check found another version: someone else wrote."""

    code = "version_conflict"


@dataclass(frozen=True, slots=True)
class NodeData:
    """A node's value, the version to write it back against, and its ephemeral owner (0 when
    persistent)."""

    data: bytes
    version: int
    ephemeral_owner: int = 0


@dataclass(frozen=True, slots=True)
class Check:
    """A transaction step: fail the whole transaction unless ``path`` is at ``version``."""

    path: str
    version: int


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes
    ephemeral: bool = False


Operation = Check | SetData | Create
#: Called with a node's value (``None`` once it is deleted or absent); returning ``False``
#: stops the watch.
DataWatcher = Callable[[NodeData | None], bool | None]
#: Called with a node's children (``[]`` when it is absent); ``False`` stops the watch.
ChildrenWatcher = Callable[[list[str]], bool | None]
StateListener = Callable[[SessionState], None]


class Coordination(Protocol):
    """A coordination engine session. Every call may raise :class:`CoordinationUnavailable`
    when the engine cannot be reached in time."""

    @property
    def state(self) -> SessionState: ...

    @property
    def session_id(self) -> int:
        """The current session's id (ephemeral nodes carry it as their owner)."""

    def start(self, timeout_s: float) -> None:
        """Connect and establish a session, or raise :class:`CoordinationUnavailable`."""

    def stop(self) -> None:
        """Close the session (its ephemeral nodes go at once)."""

    def add_state_listener(self, listener: StateListener) -> None:
        """``listener`` runs on the engine's thread at every state change; it must not block."""

    def ensure_path(self, path: str) -> None: ...

    def get(self, path: str) -> NodeData | None: ...

    def children(self, path: str) -> list[str]:
        """Children names, ``[]`` when the node does not exist."""

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, sequential: bool = False) -> str:
        """Create ``path`` (parents made as needed); the created path (with the sequence
        suffix). Raises :class:`NodeExists`."""

    def set(self, path: str, data: bytes, version: int) -> int:
        """Write ``data`` if the node is at ``version`` (-1: any); the new version. Raises
        :class:`VersionConflict` or :class:`NoNode`."""

    def delete(self, path: str, version: int = -1) -> None:
        """Delete ``path`` if it is at ``version``; absent is fine. Raises :class:`VersionConflict`."""

    def commit(self, operations: Sequence[Operation]) -> None:
        """Apply every operation or none. Raises :class:`VersionConflict` (a check or a
        versioned set failed), :class:`NodeExists` or :class:`NoNode`."""

    def watch_data(self, path: str, watcher: DataWatcher) -> None:
        """Call ``watcher`` now and at every change of ``path`` (across reconnects)."""

    def watch_children(self, path: str, watcher: ChildrenWatcher) -> None:
        """Call ``watcher`` now and at every change of ``path``'s children (across reconnects)."""


__all__ = [
    "Check",
    "ChildrenWatcher",
    "Coordination",
    "CoordinationUnavailable",
    "Create",
    "DataWatcher",
    "NoNode",
    "NodeData",
    "NodeExists",
    "Operation",
    "SessionState",
    "SetData",
    "StateListener",
    "VersionConflict",
]
