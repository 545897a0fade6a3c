"""This broker's role in its replica group, decided through ZooKeeper and applied to its store.

:class:`ReplicaGroup` is the bridge between :class:`~cluster.node.ClusterNode` (the session,
the watches, the versioned writes) and the store's HA service (:class:`Replica`, implemented by
``store.ha.ReplicaController``). It re-evaluates the role at every change of the group (its
state znode, its members) on the node's worker thread, so decisions are serialised:

* no state yet: the first member founds the group (a create: two founders cannot both win);
* the state names a live master: follow it (``become_slave``), or lead if that is us;
* the state names us but we do not lead (a restart, a lost session): lead again under a **new
  epoch**, written first — every start of leadership is a versioned write that bumps the epoch;
* no live master: publish our ``(last epoch, max offset)``, let the others do the same for a
  moment, and the member :func:`~cluster.group_state.elect` ranks first writes the new state;
  the others take over after ``takeover_after_s`` if it does not (it may be stuck).

Fencing, the part a lease cannot do alone: the replica is fenced (no write, no acknowledgement)
the moment the ZooKeeper connection is SUSPENDED, before anything else runs; it resumes only
once CONNECTED again *in the same session* with the same epoch still ours in ZooKeeper. After
an expired session (a partition past the timeout) the others saw its member node vanish and may
be electing on the very state that still names it, so it leads again only by a versioned write
of a new epoch, which an election running meanwhile either wins or loses to, never both. A
master paused past its session comes back to a state with a newer epoch and becomes a slave,
truncating what it wrote alone (the HA handshake); its slaves had already moved on and refuse
its frames. The in-sync set is changed only by the master's proposals, each a versioned write
checking both epochs (:meth:`propose`, the store's ``SyncStateAuthority``).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from cluster.coordination import SessionState
from cluster.errors import ClusterError
from cluster.group_state import (
    Candidate,
    GroupState,
    alter_sync_state_set,
    elect,
    founding_state,
    restart_as_master,
)
from cluster.model import MemberInfo
from cluster.node import ClusterNode

log = logging.getLogger("sparkmq.cluster.replication")


class Replica(Protocol):
    """The store side of a replica (``store.ha.ReplicaController``)."""

    @property
    def last_epoch(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def master_connected(self) -> bool:
        """Whether a slave's replication connection to its master is up."""

    def become_master(
        self, epoch: int, sync_state_epoch: int = 0, in_sync: Iterable[int] | None = None
    ) -> None: ...
    def become_slave(self, master_ha_address: str, master_epoch: int) -> None: ...
    def fence(self, reason: str) -> None: ...


@dataclass
class RoleCounters:
    """What ``/metrics`` and ``GET /cluster`` report of this member's role changes."""

    elections_won: int = 0
    became_master: int = 0
    became_slave: int = 0
    fences: int = 0
    failed_role_changes: int = 0
    last_role_change_ms: int = 0
    last_error: str = ""


class ReplicaGroup:
    """Drives one replica's role; implements the store's ``SyncStateAuthority``."""

    def __init__(
        self,
        node: ClusterNode,
        replica: Replica,
        *,
        unclean: bool = False,
        settle_s: float = 0.3,
        takeover_after_s: float = 2.0,
    ) -> None:
        self.node = node
        self.replica = replica
        self.unclean = unclean
        self.settle_s = settle_s
        self.takeover_after_s = takeover_after_s
        self.counters = RoleCounters()
        self._led_epoch: int | None = None
        self._following: tuple[int, int] | None = None
        self._fenced = False
        #: The ZooKeeper session expired since this member last took a role: its member node
        #: vanished, so the others may be electing; it may not resume an epoch unannounced.
        self._session_lost = False
        self._closed = False
        self._lock = threading.Lock()
        #: Members whose process is known dead (their HA port refuses connections) while their
        #: ZooKeeper session has not expired yet: ``(member id, started_ms)``.
        self._dead: set[tuple[int, int]] = set()
        self.watchdog_interval_s = 0.25
        #: Called (on the node's worker thread) with the epoch each time this member starts to
        #: lead a new epoch: what the broker keeps in memory from the CommitLog (the
        #: transaction table, ...) is rebuilt from the replicated log before it is served.
        self.on_lead: list[Callable[[int], None]] = []
        #: Called just before this member's store takes writes for a new epoch, before the
        #: ``on_lead`` rebuilds: state kept in memory from the slave's days (a transaction
        #: coordinator, a transaction table) must stop answering here, or a request served
        #: between the two acts on it (a transaction id handed out again, a commit of halves
        #: another master already committed).
        self.on_lead_begin: list[Callable[[int], None]] = []

    @property
    def me(self) -> int:
        member = self.node.member
        assert member is not None
        return member.member_id

    def start(self) -> None:
        """Follow the group from now on (the first evaluation runs at once)."""
        self.node.add_session_listener(self._on_session)
        self.node.add_view_listener(lambda _view: self.evaluate())
        threading.Thread(target=self._watch_master, name="sparkmq-master-watchdog", daemon=True).start()

    # -- a dead master, before its session expires --------------------------------------------

    def _watch_master(self) -> None:
        """A slave whose replication connection is down probes its master's HA port; two refusals
        in a row mean the master's process is gone (a paused or partitioned master still accepts
        connections, or times out): elect now rather than after the session timeout. Safe by
        the epoch: should that master live after all, the versioned state write has moved the
        group on, its slaves refuse its frames, and it steps down at its next state event."""
        refusals = 0
        while not self._closed:
            time.sleep(self.watchdog_interval_s)
            following = self._following
            if following is None or self._fenced or self.replica.master_connected:
                refusals = 0
                continue
            master = self.node.view.member(following[0])
            if master is None or master.ha is None:
                refusals = 0
                continue
            refusals = refusals + 1 if _refused(master.ha) else 0
            if refusals >= 2:
                refusals = 0
                self.node.submit(partial(self._master_gone, master, following[1]))

    def _master_gone(self, master: MemberInfo, epoch: int) -> None:
        if self._closed or self.node.session is not SessionState.CONNECTED:
            return
        state = self.node.read_group_state()
        if state is None or state.master != master.member_id or state.epoch != epoch:
            return
        with self._lock:
            self._dead.add((master.member_id, master.started_ms))
        log.warning("master %d of %s refuses connections: electing before its session expires",
                    master.member_id, self.node.name)  # fmt: skip
        self._election(state)

    def _live(self) -> dict[int, MemberInfo]:
        """The group's members with a live session, less those known dead."""
        with self._lock:
            dead = set(self._dead)
        return {
            m.member_id: m
            for m in self.node.view.group(self.node.name).members
            if (m.member_id, m.started_ms) not in dead
        }

    def close(self) -> None:
        self._closed = True

    # -- session ---------------------------------------------------------------------------

    def _on_session(self, state: SessionState) -> None:
        """On ZooKeeper's thread: fence at once when the connection is in doubt."""
        if state is SessionState.CONNECTED:
            self.node.submit(self.evaluate)
            return
        with self._lock:
            self._fenced = True
            self._session_lost = self._session_lost or state is SessionState.LOST
            self.counters.fences += 1
        self.replica.fence(f"ZooKeeper session {state}")
        log.warning("replica %s fenced: ZooKeeper session %s", self.me, state)

    # -- roles -----------------------------------------------------------------------------

    def evaluate(self) -> None:
        """Decide and apply this member's role (the node's worker thread)."""
        if self._closed or self.node.session is not SessionState.CONNECTED or self.node.member is None:
            return
        try:
            self._evaluate()
        except ClusterError as exc:  # ZooKeeper went away meanwhile: the next event retries
            self._failed(f"role evaluation: {exc}")

    def _evaluate(self) -> None:
        state = self.node.read_group_state()
        if state is None:
            founded = founding_state(self.me)
            if self.node.write_group_state(founded, None):
                self._lead(founded, "founded the group")
            return
        live = self._live()
        if state.master == self.me:
            if self._led_epoch == state.epoch and not self._session_lost:
                if self._fenced:  # connected again, same session, the epoch is still ours: resume
                    self._lead(state, "resumed after a fence", in_sync=state.sync_state_set)
                return
            # A restart, or back from an expired session: the others saw our member node vanish
            # and may be electing on this very state; lead only by winning a versioned write of
            # a new epoch (their election's write then fails, or ours does and we follow).
            renewed = restart_as_master(state, self.me)
            if self.node.write_group_state(renewed, state):
                why = "back after a lost session" if self._led_epoch is not None else "restarted"
                self._lead(renewed, f"{why}: leads a new epoch")
            return
        if state.master is not None and state.master in live:
            self._follow(state, live[state.master])
            return
        self._election(state)

    def _election(self, state: GroupState) -> None:
        self.node.publish_progress(self.replica.last_epoch, self.replica.max_offset)
        time.sleep(self.settle_s)  # the other candidates publish theirs
        current = self.node.read_group_state()
        if current is None or current.version != state.version:
            return  # someone else changed it: the watch brings us back here
        candidates = {
            m.member_id: Candidate(m.member_id, m.last_epoch or 0, m.max_offset or 0)
            for m in self._live().values()
        }
        candidates[self.me] = Candidate(self.me, self.replica.last_epoch, self.replica.max_offset)
        after = elect(current, candidates, unclean=self.unclean)
        if after is None:
            if self.me not in current.sync_state_set:
                log.warning(
                    "group %s has no live in-sync member: no master (--unclean-failover elects "
                    "an out-of-sync member, losing what only the old master had)",
                    self.node.name,
                )
            return
        if after.master != self.me:
            if self.me in current.sync_state_set:  # the winner may be stuck: take over later
                threading.Timer(self.takeover_after_s, lambda: self.node.submit(self._takeover)).start()
            return
        if self.node.write_group_state(after, current):
            self.counters.elections_won += 1
            self._lead(after, f"elected (epoch {after.epoch})")

    def _takeover(self) -> None:
        """The ranked winner did not write the state in time: any electable member may."""
        if self._closed or self.node.session is not SessionState.CONNECTED:
            return
        state = self.node.read_group_state()
        live = set(self._live())
        if state is None or (state.master is not None and state.master in live):
            return
        if self.me not in state.sync_state_set and not self.unclean:
            return
        taken = GroupState(self.me, state.epoch + 1, frozenset({self.me}), state.set_epoch + 1)
        if self.node.write_group_state(taken, state):
            self.counters.elections_won += 1
            self._lead(taken, f"took over (epoch {taken.epoch})")

    def _lead(self, state: GroupState, why: str, in_sync: frozenset[int] | None = None) -> None:
        """Lead ``state``'s epoch: after an election the set is ``{me}``; resuming an epoch after
        a fence keeps ZooKeeper's set (its members hold the confirm offset back until they ack)."""
        resumed = self._led_epoch == state.epoch
        if not resumed:
            _notify(self.on_lead_begin, state.epoch, lambda m: log.warning("before leading epoch %s", m))
        try:
            self.replica.become_master(state.epoch, state.set_epoch, in_sync)
        except Exception as exc:
            self._failed(f"becoming master of epoch {state.epoch}: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self._led_epoch, self._following, self._fenced = state.epoch, None, False
            self._session_lost = False
            self.counters.became_master += 1
            self.counters.last_role_change_ms = int(time.time() * 1000)
        log.warning("member %d of %s is master: %s", self.me, self.node.name, why)
        if not resumed:
            _notify(
                self.on_lead,
                state.epoch,
                lambda m: self._failed(f"rebuilding after becoming master of epoch {m}"),
            )

    def _follow(self, state: GroupState, master: MemberInfo) -> None:
        if self._following == (master.member_id, state.epoch) and not self._fenced:
            return
        if master.ha is None:
            self._failed(f"master {master.member_id} has no HA address")
            return
        try:
            self.replica.become_slave(master.ha, state.epoch)
        except Exception as exc:
            self._failed(
                f"following master {master.member_id} (epoch {state.epoch}): {type(exc).__name__}: {exc}"
            )
            return
        with self._lock:
            self._following, self._led_epoch, self._fenced = (master.member_id, state.epoch), None, False
            self._session_lost = False
            self.counters.became_slave += 1
            self.counters.last_role_change_ms = int(time.time() * 1000)
        log.warning(
            "member %d of %s follows master %d (epoch %d)",
            self.me,
            self.node.name,
            master.member_id,
            state.epoch,
        )

    def _failed(self, message: str) -> None:
        with self._lock:
            self.counters.failed_role_changes += 1
            self.counters.last_error = message
        self.node.warn_transient(message)

    # -- the store's SyncStateAuthority -------------------------------------------------------

    def propose(self, members: frozenset[int], master_epoch: int, set_epoch: int) -> bool:
        """Approve an in-sync set change of this master by a versioned write (HA thread)."""
        if self._fenced or self.node.session is not SessionState.CONNECTED:
            return False
        state = self.node.read_group_state()
        if state is None:
            return False
        after = alter_sync_state_set(state, self.me, members, master_epoch, set_epoch)
        return after is not None and self.node.write_group_state(after, state)

    def describe(self) -> dict[str, Any]:
        """Role-change counters for ``GET /cluster`` and ``/metrics``."""
        with self._lock:
            counters = self.counters
            return {
                "elections_won": counters.elections_won,
                "became_master": counters.became_master,
                "became_slave": counters.became_slave,
                "fences": counters.fences,
                "failed_role_changes": counters.failed_role_changes,
                "last_error": counters.last_error or None,
            }


def _refused(address: str, timeout_s: float = 0.3) -> bool:
    """Whether ``host:port`` actively refuses a TCP connection (nothing listens there)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:  # a timeout or an unreachable host: not proof of death
        return False


def _notify(listeners: list[Callable[[int], None]], epoch: int, failed: Callable[[str], None]) -> None:
    """Call every listener with ``epoch`` (a copy of the list: one may remove itself); a
    listener that raises is reported through ``failed`` and the others still run."""
    for listener in list(listeners):
        try:
            listener(epoch)
        except Exception as exc:
            failed(f"{epoch}: {type(exc).__name__}: {exc}")
