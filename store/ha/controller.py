"""``ReplicaController``: the store's HA API, which the cluster layer drives.

One per replicated store (``StoreConfig(replicated=True)``). The cluster layer (ZooKeeper
membership and election) decides roles and calls::

    controller = ReplicaController(store, HAConfig(broker_id=1, listen_port=10912), authority)
    controller.start()                       # the HA service listens; returns "host:port"
    controller.become_master(epoch, sync_state_epoch, in_sync)
    controller.become_slave("10.0.0.2:10912", master_epoch)
    controller.fence("zookeeper SUSPENDED")  # at once: no write, no acknowledgement
    controller.status()                      # ReplicaStatus for GET /cluster and /metrics
    controller.close()

``become_master(epoch)`` is ``AutoSwitchHAService.changeToMaster`` (lines 114-162): refuse an
epoch below the last one (or equal to it unless this replica led it: resuming after a fence);
drop every connection; truncate an incomplete tail (``truncateInvalidMsg``); append
``EpochEntry(epoch, max offset)`` (entries of epochs that wrote nothing are dropped first, and a
log without any epoch is adopted whole: its entry starts at the log's first offset); wait until
every record is dispatched (the index too); then take writes with the in-sync set
``{this broker}`` (what RocketMQ's controller sets on election) at version
``sync_state_epoch``. ``become_slave`` is ``changeToSlave`` (lines 164-195): refuse a master
epoch below the last one, stop writing, follow the master. A fence during a role change wins:
the change ends refused (:class:`~store.errors.ReplicaFenced`).

Failures are values or named exceptions: :class:`StaleEpoch` for an outdated role change,
``IndexBehind`` when dispatch does not finish; the replication threads' failures are counted
and the last one is in :meth:`status` (never only logged).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from store.errors import IndexBehind, InvalidArgument, NotMaster, ReplicaFenced, ReplicatedDataCorrupt
from store.ha.config import HAConfig
from store.ha.epoch_file import EpochEntry, EpochFile
from store.ha.errors import StaleEpoch
from store.ha.gate import ReplicaGate
from store.ha.master import MasterSession
from store.ha.slave import HAClient
from store.ha.status import ReplicaStatus, ReplicationStatus, Role, SyncState
from store.ha.sync_state import SyncStateAuthority
from store.ha.tls import IdentityCheck
from store.ha.truncation import TruncationReport, truncate_replica
from store.ha.wire import POLL_S, close_quietly, tune
from store.io.clock import Clock

if TYPE_CHECKING:
    from store.message_store import MessageStore

log = logging.getLogger("sparkmq.ha")

#: How long a new master waits for the index to catch up before refusing the role.
DISPATCH_WAIT_S = 60.0


class ReplicaController:
    """Roles and replication of one replicated store; thread-safe."""

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        authority: SyncStateAuthority,
        *,
        clock_ms: Clock | None = None,
        identity_check: IdentityCheck | None = None,
    ) -> None:
        """``identity_check`` (with ``config.tls``) says which certificate identity may
        replicate as which member id (the cluster's registrations); ``None``: any certificate
        of the CA."""
        if not store.replicated:
            raise InvalidArgument(
                "a ReplicaController needs a store opened with StoreConfig(replicated=True)"
            )
        self.config = config.validate()
        self._store = store
        self._replica = store.replica_log()
        self._authority = authority
        self._clock: Clock = clock_ms if clock_ms is not None else store.now_ms
        self._identity_check = identity_check
        self._epochs = EpochFile(store.config.store_dir)
        self._epochs.reconcile(self._replica.max_offset)
        self._gate = ReplicaGate()
        self._replica.set_hooks(self._gate)
        self._role_lock = threading.RLock()
        self._role = Role.STANDBY
        self._master: MasterSession | None = None
        self._client: HAClient | None = None
        self._led_epoch = -1
        self._fences = 0
        self._server: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self.truncations = 0
        self.truncated_bytes = 0
        self.stale_frames_rejected = 0
        self.last_error = ""

    # --- the HA service ---------------------------------------------------------------------
    def start(self) -> str:
        """Listen on ``listen_host:listen_port``; returns the address slaves connect to."""
        if self._server is None:
            server = socket.create_server((self.config.listen_host, self.config.listen_port), backlog=16)
            server.settimeout(POLL_S)
            self._server = server
            self._accept_thread = threading.Thread(
                target=self._accept_loop, name="sparkmq-ha-accept", daemon=True
            )
            self._accept_thread.start()
        return self.ha_address

    @property
    def ha_address(self) -> str:
        """``host:port`` of the HA service ("" before :meth:`start`)."""
        if self._server is None:
            return ""
        host, port = self._server.getsockname()[:2]
        return f"{host}:{port}"

    def _accept_loop(self) -> None:
        server = self._server
        assert server is not None
        while not self._closing.is_set():
            try:
                sock, peer = server.accept()
            except TimeoutError:
                continue
            except OSError:
                break  # closed
            session = self._master
            if session is None:
                close_quietly(sock)  # not the master: the slave backs off and retries
                continue
            tune(sock)
            session.accept(sock, f"{peer[0]}:{peer[1]}")

    # --- roles ----------------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        return self._role

    @property
    def last_epoch(self) -> int:
        """The newest epoch in the epoch file (-1: none): an election's first key."""
        return self._epochs.last_epoch

    @property
    def max_offset(self) -> int:
        """The CommitLog's max offset: an election's second key."""
        return self._replica.max_offset

    @property
    def master_connected(self) -> bool:
        """A slave: whether its replication connection to the master is up (False otherwise)."""
        client = self._client
        return client is not None and client.connected

    def become_master(
        self, epoch: int, sync_state_epoch: int = 0, in_sync: Iterable[int] | None = None
    ) -> None:
        """Take writes as the master of ``epoch`` (see the module docstring), with the in-sync
        set the cluster layer holds at version ``sync_state_epoch``: ``{broker_id}`` after an
        election (the default), the set as it stands when resuming an epoch after a fence (its
        other members hold the confirm offset back until they ack again or the set shrinks).
        Raises :class:`StaleEpoch`, ``IndexBehind``, ``ReplicaFenced`` (a fence came
        meanwhile) or ``InvalidArgument`` (a set without this broker)."""
        members = frozenset({self.config.broker_id} if in_sync is None else in_sync)
        if self.config.broker_id not in members:
            raise InvalidArgument(f"the in-sync set {sorted(members)} must hold this broker")
        with self._role_lock:
            fences = self._fences
            last = self._epochs.last_epoch
            if epoch < last or (epoch == last and self._led_epoch != epoch):
                raise StaleEpoch(f"cannot become master of epoch {epoch}: this replica has seen epoch {last}")
            self._gate.refuse(lambda: NotMaster(f"not the master yet: becoming master of epoch {epoch}"))
            self._stop_roles(f"becoming master of epoch {epoch}")
            replica = self._replica
            try:
                replica.dispatch_appended()  # what the slave's last frames left undispatched
            except ReplicatedDataCorrupt as exc:  # the bad bytes are cut already: the tail goes
                self._record(f"becoming master: {exc}")
            if replica.dispatched_to < replica.max_offset:
                self._truncate(replica.dispatched_to, "an incomplete record at the end (truncateInvalidMsg)")
            if epoch > last:
                self._epochs.truncate_suffix_by_offset(replica.max_offset)  # epochs that wrote nothing
                start = replica.max_offset if self._epochs.entries else replica.min_offset
                self._epochs.append(EpochEntry(epoch, start))
            self._led_epoch = epoch  # its entry is written: resuming it later is allowed
            if not replica.wait_dispatched(DISPATCH_WAIT_S):
                raise IndexBehind(f"the index did not catch up within {DISPATCH_WAIT_S:.0f} s")
            replica.forget_beyond(replica.max_offset)
            state = SyncState(members, epoch, sync_state_epoch)
            session = MasterSession(
                replica,
                self._epochs,
                self.config,
                self._authority,
                state,
                clock_ms=self._clock,
                report=self._record,
                identity_check=self._identity_check,
            )
            if fences != self._fences:
                raise ReplicaFenced(f"fenced while becoming master of epoch {epoch}")
            session.start()
            self._master, self._role = session, Role.MASTER
            self._gate.open_for(session)
            log.info("master of epoch %d from offset %d", epoch, replica.max_offset)

    def become_slave(self, master_ha_address: str, master_epoch: int) -> None:
        """Replicate from the master at ``master_ha_address`` (whose epoch is
        ``master_epoch``). Raises :class:`StaleEpoch` or ``ReplicaFenced``."""
        with self._role_lock:
            fences = self._fences
            last = self._epochs.last_epoch
            if master_epoch < last:
                raise StaleEpoch(
                    f"cannot follow a master of epoch {master_epoch}: this replica has seen epoch {last}"
                )
            self._gate.refuse(lambda: NotMaster(f"not the master: a slave of {master_ha_address}"))
            self._stop_roles(f"following {master_ha_address}")
            if fences != self._fences:
                raise ReplicaFenced(f"fenced while becoming a slave of {master_ha_address}")
            client = HAClient(
                self._replica,
                self._epochs,
                self.config,
                master_ha_address,
                master_epoch,
                truncate=self._truncate,
                report=self._record,
                rejected=self._count_stale_frame,
            )
            self._client, self._role = client, Role.SLAVE
            client.start()

    def fence(self, reason: str = "coordination session suspended") -> None:
        """Stop writing and acknowledging at once (waiters get ``ReplicaFenced``), stop
        replicating; reads below the confirm offset go on. Lasts until the next role change."""
        self._fences += 1
        self._gate.refuse(lambda: ReplicaFenced(f"fenced: {reason}"))
        session = self._master
        if session is not None:
            session.stop(f"fenced: {reason}")
        with self._role_lock:
            self._stop_roles(f"fenced: {reason}")
            self._role = Role.FENCED

    def _stop_roles(self, reason: str) -> None:
        session, self._master = self._master, None
        if session is not None:
            session.stop(reason)
        client, self._client = self._client, None
        if client is not None and not client.stop():
            self._record(f"the replication thread from {client.master_address} did not stop ({reason})")
        self._role = Role.STANDBY

    def _truncate(self, point: int, reason: str) -> TruncationReport:
        report = truncate_replica(self._replica, self._epochs, point, reason)
        self.truncations += 1
        self.truncated_bytes += report.dropped_bytes
        return report

    def _count_stale_frame(self) -> None:
        self.stale_frames_rejected += 1

    def _record(self, message: str) -> None:
        log.warning("replication: %s", message)
        self.last_error = message

    # --- acknowledgements -----------------------------------------------------------------------
    def wait_replicated(self, offset: int, timeout_s: float) -> ReplicationStatus:
        """Wait until every in-sync replica holds the CommitLog up to ``offset``: PUT_OK,
        FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE (the set is below ``min_insync``) or
        SERVICE_NOT_AVAILABLE (not the master)."""
        session = self._master
        if session is None:
            return ReplicationStatus.SERVICE_NOT_AVAILABLE
        return session.wait_replicated(offset, timeout_s)

    def can_accept_write(self, min_insync: int | None = None) -> ReplicationStatus:
        """Would a write be taken now: PUT_OK, SLAVE_NOT_AVAILABLE (fewer in-sync replicas than
        ``min_insync``, default the configured one) or SERVICE_NOT_AVAILABLE (not the master)."""
        session = self._master
        if session is None or self._role is not Role.MASTER:
            return ReplicationStatus.SERVICE_NOT_AVAILABLE
        state, _ = session.sync_state()
        needed = self.config.min_insync if min_insync is None else min_insync
        return (
            ReplicationStatus.PUT_OK
            if len(state.members) >= needed
            else ReplicationStatus.SLAVE_NOT_AVAILABLE
        )

    # --- status ---------------------------------------------------------------------------------
    def status(self) -> ReplicaStatus:
        replica = self._replica
        last = self._epochs.last_entry
        session, client = self._master, self._client
        in_sync: frozenset[int] = frozenset()
        pending: frozenset[int] | None = None
        set_epoch, refusals = -1, 0
        if session is not None:
            state, pending = session.sync_state()
            in_sync, set_epoch, refusals = state.members, state.set_epoch, session.sync_state_refusals
        return ReplicaStatus(
            broker_id=self.config.broker_id,
            role=self._role,
            epoch=last.epoch if last is not None else -1,
            epoch_start_offset=last.start_offset if last is not None else -1,
            max_offset=replica.max_offset,
            confirm_offset=replica.confirm_offset,
            ha_address=self.ha_address,
            in_sync=in_sync,
            sync_state_epoch=set_epoch,
            pending_in_sync=pending,
            slaves=session.slaves() if session is not None else (),
            master_address=client.master_address if client is not None else "",
            connected=client.connected if client is not None else False,
            truncations=self.truncations,
            truncated_bytes=self.truncated_bytes,
            stale_frames_rejected=self.stale_frames_rejected,
            sync_state_refusals=refusals,
            last_error=self.last_error,
        )

    @property
    def epochs(self) -> EpochFile:
        """The epoch file (read it; the controller writes it)."""
        return self._epochs

    def close(self) -> None:
        """Stop every role and the HA service; the store stays open (its owner closes it)."""
        self._closing.set()
        self.fence("closing")
        if self._server is not None:
            close_quietly(self._server)
        if self._accept_thread is not None:
            self._accept_thread.join(5.0)
