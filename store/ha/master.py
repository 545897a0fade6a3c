"""The master role of one epoch (RocketMQ ``AutoSwitchHAService`` as a master).

A :class:`MasterSession` owns the slaves' connections (:mod:`store.ha.connection`), the
in-sync set and the confirm offset (:mod:`store.ha.sync_state`), and answers the put path's
replication hooks (:mod:`store.write.replication`)::

    check_writable()   refuses (nothing appended) below ``min_insync`` members, master
                       included (SlaveNotAvailable), or once stopped (ReplicaFenced)
    appended(end)      wakes every connection's writer (no polling); with no slave in the
                       set the confirm offset follows the max offset at once
    acknowledge(end)   ASYNC: returns; SYNC: waits until every in-sync member holds ``end``
                       (confirm offset >= end) with the set still >= ``min_insync``, else
                       FlushSlaveTimeout / SlaveNotAvailable(appended) / ReplicaFenced

A background thread proposes in-sync set changes to the :class:`SyncStateAuthority` (right
after an ack that may expand it or a disconnection, and every
``sync_state_check_interval_ms``); only an approved change takes effect, and while one is
pending the confirm offset is computed over both sets. :meth:`stop` (fencing, a role change)
refuses and releases every waiter at once and closes every connection.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable

from store.errors import FlushSlaveTimeout, ReplicaFenced, SlaveNotAvailable
from store.ha.config import HAConfig, ReplicationMode
from store.ha.connection import SlaveConnection
from store.ha.epoch_file import EpochEntry, EpochFile
from store.ha.status import ReplicationStatus, SlaveStatus, SyncState
from store.ha.sync_state import InSyncTracker, SyncStateAuthority
from store.ha.tls import IdentityCheck
from store.io.clock import Clock
from store.write.replica_log import ReplicaLog

log = logging.getLogger("sparkmq.ha")


class MasterSession:
    """The master of ``sync_state.master_epoch``; thread-safe."""

    def __init__(
        self,
        replica: ReplicaLog,
        epochs: EpochFile,
        config: HAConfig,
        authority: SyncStateAuthority,
        sync_state: SyncState,
        *,
        clock_ms: Clock,
        report: Callable[[str], None],
        identity_check: IdentityCheck | None = None,
    ) -> None:
        self.log = replica
        self.config = config
        #: Mutual TLS (``config.tls``): one server context for every slave's connection.
        self.tls_context = config.tls.server_context() if config.tls is not None else None
        self.identity_check = identity_check
        self._epochs = epochs
        self._authority = authority
        self._clock = clock_ms
        self._report = report
        #: Guards everything below; writers (one per slave) wait on it for appends and moves.
        self._cond = threading.Condition()
        #: Acknowledgement waiters, a heap of (offset, arrival, event): a confirm move wakes
        #: exactly the ones it satisfies, not every waiting producer.
        self._waiters: list[tuple[int, int, threading.Event]] = []
        self._arrival = itertools.count()
        self._tracker = InSyncTracker(config.broker_id, sync_state, config.max_time_slave_not_catchup_ms)
        self._connections: dict[int, SlaveConnection] = {}
        self._all: set[SlaveConnection] = set()
        self._confirm = replica.confirm_offset
        #: The end of what the put path has appended *and dispatched* (:meth:`appended`): writers
        #: send nothing past it. Bytes past it may still be taken back: an append whose
        #: ConsumeQueue dispatch fails (a full disk) is truncated away, and a slave that got them
        #: would hold, and acknowledge, bytes the master no longer has.
        self.appended_end = replica.max_offset
        #: Bumped on every append and confirm move; writers sleep until it changes.
        self.generation = 0
        self._stopped: str | None = None
        self._wake_sync = threading.Event()
        self._sync_thread = threading.Thread(
            target=self._sync_loop, name="sparkmq-ha-sync-state", daemon=True
        )
        self.sync_state_refusals = 0

    @property
    def epoch(self) -> int:
        return self._tracker.state.master_epoch

    def start(self) -> None:
        with self._cond:
            self._recompute()
        self._publish()
        self._sync_thread.start()

    def stop(self, reason: str) -> None:
        """Refuse writes and acknowledgements from now on, release every waiter, close every
        connection (idempotent)."""
        with self._cond:
            if self._stopped is not None:
                return
            self._stopped = reason
            connections = list(self._all)
            self._cond.notify_all()
            self._wake_all_waiters()
        self._wake_sync.set()
        for connection in connections:
            connection.close(f"master stopped: {reason}")
        for connection in connections:
            connection.join(2.0)
        if self._sync_thread.is_alive() and self._sync_thread is not threading.current_thread():
            self._sync_thread.join(5.0)

    # --- connections --------------------------------------------------------------------
    def accept(self, sock: socket.socket, address: str) -> None:
        connection = SlaveConnection(self, sock, address)
        with self._cond:
            if self._stopped is not None:
                connection.close("not the master any more")
                return
            self._all.add(connection)
        connection.start()

    def register(self, connection: SlaveConnection) -> None:
        """The slave said who it is; a previous connection of the same slave is dropped."""
        with self._cond:
            previous = self._connections.get(connection.broker_id)
            self._connections[connection.broker_id] = connection
            self._tracker.connected(connection.broker_id, connection.async_learner)
        if previous is not None and previous is not connection:
            previous.close("the slave connected again")

    def unregister(self, connection: SlaveConnection, reason: str) -> None:
        with self._cond:
            self._all.discard(connection)
            if self._connections.get(connection.broker_id) is connection:
                del self._connections[connection.broker_id]
                self._tracker.disconnected(connection.broker_id)
                log.info("slave %d (%s) disconnected: %s", connection.broker_id, connection.address, reason)
            self._recompute()
        self._publish()
        self._wake_sync.set()

    def on_ack(self, connection: SlaveConnection, ack_offset: int) -> None:
        with self._cond:
            if self._connections.get(connection.broker_id) is not connection:
                return
            self._tracker.acked(connection.broker_id, ack_offset, self.log.max_offset, self._clock())
            self._recompute()
            maybe_expand = connection.broker_id not in self._tracker.state.members
        self._publish()
        if maybe_expand:
            self._wake_sync.set()

    def transferred(self, connection: SlaveConnection) -> None:
        with self._cond:
            self._tracker.transferred(connection.broker_id, self.log.max_offset, self._clock())

    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        return self._epochs.entries

    def record_error(self, message: str) -> None:
        self._report(message)

    # --- the confirm offset ---------------------------------------------------------------
    @property
    def confirm_offset(self) -> int:
        return self._confirm

    def _recompute(self) -> None:
        """(Lock held.) Move the confirm offset as the in-sync set's acks allow; waiters and
        writers wake now, readers once :meth:`_publish` runs (outside every lock)."""
        if self._stopped is not None:
            return  # a fenced master's confirm offset stays where it was (#6662)
        confirm = self._tracker.confirm_offset(self.log.max_offset, self._confirm)
        if confirm > self._confirm:
            self._confirm = confirm
            self.generation += 1
            self._cond.notify_all()
            while self._waiters and self._waiters[0][0] <= confirm:
                heapq.heappop(self._waiters)[2].set()

    def _wake_all_waiters(self) -> None:
        """(Lock held.) The in-sync set or the role changed: every waiter looks again."""
        for _, _, event in self._waiters:
            event.set()
        self._waiters.clear()

    def _publish(self) -> None:
        """Show readers the confirm offset (releases held arrival notices: never called with
        the put lock or this session's lock held, so listeners run outside them)."""
        if self._stopped is None:
            self.log.advance_confirm(self._confirm)

    def wait_for_change(self, generation: int, timeout_s: float) -> None:
        """Block until an append or a confirm move after ``generation`` (or the timeout)."""
        with self._cond:
            if self.generation == generation and self._stopped is None:
                self._cond.wait(timeout_s)

    # --- the put path's hooks -------------------------------------------------------------
    def check_writable(self) -> None:
        with self._cond:
            if self._stopped is not None:
                raise ReplicaFenced(f"not writable: {self._stopped}")
            members = self._tracker.in_sync_count()
        if members < self.config.min_insync:
            raise SlaveNotAvailable(
                f"{members} in-sync replica(s), {self.config.min_insync} required: nothing written"
            )

    def appended(self, end_offset: int) -> None:
        """(Put lock held.) Wake the writers; readers learn a moved confirm offset in
        :meth:`acknowledge`, after the put lock."""
        with self._cond:
            self.appended_end = max(self.appended_end, end_offset)
            self.generation += 1
            self._recompute()
            self._cond.notify_all()

    def acknowledge(self, end_offset: int) -> None:
        self._publish()
        if self.config.replication is ReplicationMode.ASYNC:
            if self._stopped is not None:
                raise ReplicaFenced(f"not acknowledged: {self._stopped}")
            return
        status = self.wait_replicated(end_offset, self.config.ack_timeout_ms / 1000)
        if status is ReplicationStatus.PUT_OK:
            return
        if status is ReplicationStatus.FLUSH_SLAVE_TIMEOUT:
            raise FlushSlaveTimeout(
                f"the in-sync replicas did not all hold offset {end_offset} within "
                f"{self.config.ack_timeout_ms} ms (confirmed up to {self._confirm})",
                end_offset=end_offset,
            )
        if status is ReplicationStatus.SLAVE_NOT_AVAILABLE:
            raise SlaveNotAvailable(
                f"the in-sync set fell below {self.config.min_insync} before offset {end_offset} "
                "was replicated: stored on the master, not acknowledged",
                appended=True,
            )
        raise ReplicaFenced(f"not acknowledged: {self._stopped or 'not the master'}")

    def wait_replicated(self, offset: int, timeout_s: float) -> ReplicationStatus:
        """Wait until every in-sync member holds the CommitLog up to ``offset``."""
        deadline = time.monotonic() + timeout_s
        event = threading.Event()
        while True:
            with self._cond:
                settled = self._settled(offset)
                if settled is not None:
                    return settled
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return ReplicationStatus.FLUSH_SLAVE_TIMEOUT
                event.clear()
                heapq.heappush(self._waiters, (offset, next(self._arrival), event))
            event.wait(remaining)  # a timed-out entry stays in the heap until a move pops it

    def _settled(self, offset: int) -> ReplicationStatus | None:
        """(Lock held.) The outcome for ``offset`` if there is one already."""
        if self._stopped is not None:
            return ReplicationStatus.SERVICE_NOT_AVAILABLE
        if self._tracker.in_sync_count() < self.config.min_insync:
            return ReplicationStatus.SLAVE_NOT_AVAILABLE
        if self._confirm >= offset:
            return ReplicationStatus.PUT_OK
        return None

    # --- the in-sync set ------------------------------------------------------------------
    def _sync_loop(self) -> None:
        interval_s = self.config.sync_state_check_interval_ms / 1000
        while self._stopped is None:
            self._wake_sync.wait(interval_s)
            self._wake_sync.clear()
            proposal = self._next_proposal()
            if proposal is None:
                continue
            members, base = proposal
            try:
                approved = self._authority.propose(members, base.master_epoch, base.set_epoch)
            except Exception as exc:  # the authority's failure is a refusal, recorded
                self._report(f"in-sync set proposal {sorted(members)} failed: {type(exc).__name__}: {exc}")
                approved = False
            with self._cond:
                if self._stopped is not None:
                    return
                if approved:
                    state = self._tracker.approve(members)
                    log.info("in-sync set is now %s (version %d)", sorted(state.members), state.set_epoch)
                else:
                    self._tracker.refuse()
                    self.sync_state_refusals += 1
                self._recompute()
                self._wake_all_waiters()
            self._publish()
            if not approved:
                self._wake_sync.clear()
                time.sleep(interval_s)  # do not hammer an authority that refuses

    def _next_proposal(self) -> tuple[frozenset[int], SyncState] | None:
        with self._cond:
            if self._stopped is not None or self._tracker.pending is not None:
                return None
            last = self._epochs.last_entry
            start = last.start_offset if last is not None else 0
            members = self._tracker.desired(self._clock(), self._confirm, start)
            if members == self._tracker.state.members:
                return None
            self._tracker.pending = members
            self._recompute()  # over both sets now
            return members, self._tracker.state

    # --- status -----------------------------------------------------------------------------
    def sync_state(self) -> tuple[SyncState, frozenset[int] | None]:
        with self._cond:
            return self._tracker.state, self._tracker.pending

    def slaves(self) -> tuple[SlaveStatus, ...]:
        now = self._clock()
        max_offset = self.log.max_offset
        with self._cond:
            members = self._tracker.state.members
            out = []
            for broker_id, connection in sorted(self._connections.items()):
                progress = self._tracker.slaves.get(broker_id)
                ack = progress.ack_offset if progress is not None else -1
                caught_up = progress.caught_up_ms if progress is not None else -1
                out.append(
                    SlaveStatus(
                        broker_id=broker_id,
                        address=connection.address,
                        ack_offset=ack,
                        lag_bytes=max(0, max_offset - ack) if ack >= 0 else max_offset,
                        in_sync=broker_id in members,
                        async_learner=connection.async_learner,
                        transfer_offset=connection.transfer_offset,
                        not_caught_up_ms=-1 if caught_up < 0 else max(0, now - caught_up),
                    )
                )
            return tuple(out)
