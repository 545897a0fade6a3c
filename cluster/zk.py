"""The :class:`~cluster.coordination.Coordination` engine on Apache ZooKeeper, through kazoo.

Thin on purpose: each method is one kazoo call with a deadline, its exceptions translated to
the cluster's named ones. kazoo keeps the session alive from its own thread (heartbeats never
wait for the broker's event loop) and its ``DataWatch``/``ChildrenWatch`` recipes re-register
after reconnects and session loss.

Only this module imports kazoo (``tests/test_architecture.py`` keeps it so).

**Digest ACLs.** With a digest identity in the address (``zk://user:password@...`` or
``--zk-auth-file``) the session authenticates with it and every node created here (paths,
ephemerals, transaction creates: kazoo applies ``default_acl`` to all of them) carries one ACL,
``digest:user:<sha1 hash>`` with every permission: a session without the credential gets
``NoAuthError`` on them. kazoo logs the ``Auth`` packet (with the password) at DEBUG, so the
``kazoo`` loggers are held at INFO or above while a digest is in use.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, ZnodeStat
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.security import ACL, make_digest_acl

from cluster.address import ZkAddress, ZkDigest
from cluster.coordination import (
    Check,
    ChildrenWatcher,
    Create,
    DataWatcher,
    NodeData,
    NodeExists,
    NoNode,
    Operation,
    SessionState,
    SetData,
    StateListener,
    VersionConflict,
)
from cluster.errors import CoordinationUnavailable

log = logging.getLogger("sparkmq.cluster.zk")


def digest_acl(digest: ZkDigest) -> list[ACL]:
    """Every permission for ``digest``'s user, none for anyone else."""
    return [make_digest_acl(digest.user, digest.password, all=True)]


def quiet_kazoo_debug() -> None:
    """Hold kazoo's loggers at INFO or above: its DEBUG lines carry the ``Auth`` packet."""
    for name in ("kazoo", "kazoo.client", "kazoo.protocol.connection"):
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.INFO:
            logger.setLevel(logging.INFO)


_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


class ZooKeeperCoordination:
    """One kazoo session on the ensemble of ``address``, rooted at its chroot.

    ``session_timeout_s`` is what the broker asks for; the server clamps it to its
    ``[min,max]SessionTimeout``. ``op_timeout_s`` bounds every call: past it the call raises
    :class:`CoordinationUnavailable` rather than stalling a request."""

    def __init__(
        self, address: ZkAddress, *, session_timeout_s: float = 6.0, op_timeout_s: float = 3.0
    ) -> None:
        self.address = address
        self._root = address.chroot
        self._op_timeout_s = op_timeout_s
        digest = address.digest
        if digest is not None:
            quiet_kazoo_debug()
        self._client = KazooClient(
            hosts=address.hosts,
            timeout=session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0},
            auth_data=None if digest is None else [("digest", digest.auth_data)],
            default_acl=None if digest is None else digest_acl(digest),
        )
        self._state = SessionState.LOST
        self._listeners: list[StateListener] = []
        self._client.add_listener(self._on_state)

    # -- session --------------------------------------------------------------------------

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def session_id(self) -> int:
        session = self._client.client_id
        return int(session[0]) if session else 0

    @property
    def negotiated_timeout_s(self) -> float:
        """The session timeout the server granted (seconds)."""
        return float(self._client._session_timeout) / 1000.0

    def start(self, timeout_s: float) -> None:
        try:
            self._client.start(timeout=timeout_s)
        except KazooTimeoutError:
            self._client.stop()
            raise CoordinationUnavailable(
                f"ZooKeeper at {self.address} did not answer within {timeout_s:.0f} s"
            ) from None
        self._state = SessionState.CONNECTED
        self._call(lambda: self._client.ensure_path_async(self._root))

    def stop(self) -> None:
        try:
            self._client.stop()
        finally:
            self._client.close()

    def add_state_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def _on_state(self, state: str) -> None:
        self._state = _STATES[state]
        log.info("ZooKeeper session %s: %s", self.address, self._state)
        for listener in list(self._listeners):
            listener(self._state)

    # -- data -----------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        return self._root + path if path != "/" else self._root

    def _call(self, start: Any) -> Any:
        """Run one kazoo async call with the op deadline, translating its failures."""
        try:
            return start().get(timeout=self._op_timeout_s)
        except NodeExistsError:
            raise NodeExists("node exists") from None
        except NoNodeError:
            raise NoNode("no node") from None
        except BadVersionError:
            raise VersionConflict("version conflict") from None
        except NoAuthError:
            raise CoordinationUnavailable(
                f"ZooKeeper at {self.address} refused access (NoAuth): the node's ACL does not "
                "grant this broker's digest identity (check --cluster user:password / --zk-auth-file)"
            ) from None
        except (KazooTimeoutError, ConnectionLoss, SessionExpiredError) as exc:
            raise CoordinationUnavailable(
                f"ZooKeeper at {self.address} is unreachable ({type(exc).__name__})"
            ) from None
        except KazooException as exc:
            raise CoordinationUnavailable(
                f"ZooKeeper at {self.address}: {type(exc).__name__}: {exc}"
            ) from None

    def ensure_path(self, path: str) -> None:
        self._call(lambda: self._client.ensure_path_async(self._path(path)))

    def get(self, path: str) -> NodeData | None:
        try:
            data, stat = self._call(lambda: self._client.get_async(self._path(path)))
        except NoNode:
            return None
        return NodeData(bytes(data or b""), stat.version, stat.ephemeralOwner)

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self._call(lambda: self._client.get_children_async(self._path(path))))
        except NoNode:
            return []

    def create(self, path: str, data: bytes, *, ephemeral: bool = False, sequential: bool = False) -> str:
        created: str = self._call(
            lambda: self._client.create_async(
                self._path(path), data, ephemeral=ephemeral, sequence=sequential, makepath=True
            )
        )
        return created[len(self._root) :]

    def set(self, path: str, data: bytes, version: int) -> int:
        stat: ZnodeStat = self._call(lambda: self._client.set_async(self._path(path), data, version))
        return int(stat.version)

    def delete(self, path: str, version: int = -1) -> None:
        with contextlib.suppress(NoNode):
            self._call(lambda: self._client.delete_async(self._path(path), version))

    def commit(self, operations: Sequence[Operation]) -> None:
        transaction = self._client.transaction()
        for op in operations:
            if isinstance(op, Check):
                transaction.check(self._path(op.path), op.version)
            elif isinstance(op, SetData):
                transaction.set_data(self._path(op.path), op.data, op.version)
            elif isinstance(op, Create):
                transaction.create(self._path(op.path), op.data, ephemeral=op.ephemeral)
        results = self._call(transaction.commit_async)
        failures = [
            r for r in results if isinstance(r, Exception) and not isinstance(r, RuntimeInconsistency)
        ]
        if not failures:
            return
        first = failures[0]
        if isinstance(first, BadVersionError):
            raise VersionConflict("a transaction check failed: another writer changed the node")
        if isinstance(first, NodeExistsError):
            raise NodeExists("a transaction create found the node")
        if isinstance(first, NoNodeError):
            raise NoNode("a transaction step found no node")
        raise CoordinationUnavailable(f"ZooKeeper transaction failed: {type(first).__name__}")

    # -- watches --------------------------------------------------------------------------

    def watch_data(self, path: str, watcher: DataWatcher) -> None:
        def on_change(data: bytes | None, stat: ZnodeStat | None) -> bool | None:
            if stat is None:
                return watcher(None)
            return watcher(NodeData(bytes(data or b""), stat.version, stat.ephemeralOwner))

        DataWatch(self._client, self._path(path), on_change)

    def watch_children(self, path: str, watcher: ChildrenWatcher) -> None:
        full = self._path(path)
        self._call(lambda: self._client.ensure_path_async(full))
        ChildrenWatch(self._client, full, lambda names: watcher(sorted(names)))
