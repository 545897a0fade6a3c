"""The in-sync set (RocketMQ ``SyncStateSet``) and the confirm offset: a pure state machine.

The master keeps, per connected slave, its last acknowledged offset and when it last caught
up. From them (``AutoSwitchHAService.java``, develop @ 8fc57f14):

* **shrink** (``maybeShrinkSyncStateSet``, lines 269-303): a member leaves when it has not
  caught up for ``max_time_slave_not_catchup_ms`` or is no longer connected (RocketMQ also
  drops a member the moment its connection goes, ``removeConnection`` lines 100-112);
* **expand** (``maybeExpandInSyncStateSet``, lines 305-326, called from
  ``AutoSwitchHAConnection.maybeExpandInSyncStateSet`` lines 214-220): a connected slave that
  is not an async learner joins when its ack reaches the confirm offset and the start of the
  current epoch (and everything it was sent), having caught up within the shrink window (so a
  member the window just dropped does not rejoin in the same breath);
* **caught up** (``AutoSwitchHAConnection`` lines 214-217): an ack at or past the master's max
  offset at the last transfer counts as caught up now (or at that transfer);
* **confirm offset** (``computeConfirmOffset``, lines 416-438): the smallest ack over the
  in-sync set, the master's max offset for the master; it does not move while a member is
  disconnected (#6662). While a change awaits approval, the set used is the union of the old
  and the proposed one (``getSyncStateSet``, lines 452-471). It never moves back.

A change takes effect only once the :class:`SyncStateAuthority` approves it (the cluster
layer's versioned write, as RocketMQ's controller checks ``masterEpoch`` and
``syncStateSetEpoch`` in ``ReplicasInfoManager.alterSyncStateSet``). Time is passed in
(``now_ms``); nothing here reads a clock, a socket or a lock.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from store.ha.status import SyncState


class SyncStateAuthority(Protocol):
    """Who approves changes of the in-sync set (the cluster layer: a versioned ZooKeeper write)."""

    def propose(self, members: frozenset[int], master_epoch: int, set_epoch: int) -> bool:
        """Make ``members`` the in-sync set, replacing the set of version ``set_epoch`` owned by
        the master of ``master_epoch``; the new set's version is ``set_epoch + 1``. Returns
        False when either no longer matches (this master was deposed, or the set changed
        meanwhile): nothing changes then. May block (a network write); may raise, which
        counts as a refusal."""
        ...


class InMemorySyncStateAuthority:
    """A :class:`SyncStateAuthority` in one process (tests, a single-machine group): approves a
    proposal when the epochs match its own record, like the versioned write would."""

    def __init__(self, state: SyncState | None = None) -> None:
        self._lock = threading.Lock()
        self.state = state
        self.proposals = 0
        self.refusals = 0

    def reset(self, state: SyncState) -> None:
        """What an election writes: the new master's set."""
        with self._lock:
            self.state = state

    def propose(self, members: frozenset[int], master_epoch: int, set_epoch: int) -> bool:
        with self._lock:
            self.proposals += 1
            current = self.state
            if current is None or current.master_epoch != master_epoch or current.set_epoch != set_epoch:
                self.refusals += 1
                return False
            self.state = SyncState(members, master_epoch, set_epoch + 1)
            return True


@dataclass(slots=True)
class SlaveProgress:
    """What the master knows about one connected slave."""

    broker_id: int
    async_learner: bool
    #: Last acknowledged CommitLog offset (-1: none yet).
    ack_offset: int = -1
    #: When it was last caught up (-1: never).
    caught_up_ms: int = -1
    #: Master max offset and time at the last transfer frame sent to it.
    max_at_last_transfer: int = -1
    last_transfer_ms: int = 0


class InSyncTracker:
    """The in-sync set of one master epoch and the progress of its slaves (not thread-safe:
    the owner serialises calls)."""

    def __init__(self, local_id: int, state: SyncState, max_not_catchup_ms: int) -> None:
        if local_id not in state.members:
            raise ValueError(f"the in-sync set {set(state.members)} must contain the master {local_id}")
        self.local_id = local_id
        self.state = state
        self.max_not_catchup_ms = max_not_catchup_ms
        self.slaves: dict[int, SlaveProgress] = {}
        #: A change sent to the authority and not answered yet.
        self.pending: frozenset[int] | None = None

    # --- events ---------------------------------------------------------------------------
    def connected(self, broker_id: int, async_learner: bool) -> SlaveProgress:
        progress = SlaveProgress(broker_id, async_learner)
        self.slaves[broker_id] = progress
        return progress

    def disconnected(self, broker_id: int) -> None:
        self.slaves.pop(broker_id, None)

    def transferred(self, broker_id: int, master_max: int, now_ms: int) -> None:
        progress = self.slaves.get(broker_id)
        if progress is not None:
            progress.max_at_last_transfer = master_max
            progress.last_transfer_ms = now_ms

    def acked(self, broker_id: int, ack_offset: int, master_max: int, now_ms: int) -> None:
        progress = self.slaves.get(broker_id)
        if progress is None:
            return
        progress.ack_offset = max(progress.ack_offset, ack_offset)
        if progress.ack_offset >= master_max:
            progress.caught_up_ms = now_ms
        elif progress.ack_offset >= progress.max_at_last_transfer >= 0:
            progress.caught_up_ms = max(progress.caught_up_ms, progress.last_transfer_ms)

    def approve(self, members: frozenset[int]) -> SyncState:
        """The authority approved ``members`` (the pending proposal)."""
        self.state = SyncState(members, self.state.master_epoch, self.state.set_epoch + 1)
        self.pending = None
        return self.state

    def refuse(self) -> None:
        self.pending = None

    # --- decisions ------------------------------------------------------------------------
    def desired(self, now_ms: int, confirm_offset: int, epoch_start_offset: int) -> frozenset[int]:
        """The in-sync set the rules ask for now (equal to the approved one: no change)."""
        members = set(self.state.members)
        for broker_id in list(members):
            if broker_id == self.local_id:
                continue
            progress = self.slaves.get(broker_id)
            if progress is None or now_ms - progress.caught_up_ms > self.max_not_catchup_ms:
                members.discard(broker_id)
        for broker_id, progress in self.slaves.items():
            if broker_id in members or progress.async_learner or progress.ack_offset < 0:
                continue
            sent_all = progress.ack_offset >= progress.max_at_last_transfer
            fresh = now_ms - progress.caught_up_ms <= self.max_not_catchup_ms
            if sent_all and fresh and progress.ack_offset >= max(confirm_offset, epoch_start_offset):
                members.add(broker_id)
        return frozenset(members)

    def confirm_members(self) -> frozenset[int]:
        """The set the confirm offset is computed over (old and proposed while pending)."""
        return self.state.members | (self.pending or frozenset())

    def confirm_offset(self, master_max: int, current: int) -> int:
        """The new confirm offset: the smallest ack of the members, the master's max offset
        for the master; ``current`` while a member is disconnected or has not acked; never
        below ``current``."""
        candidate = master_max
        for broker_id in self.confirm_members():
            if broker_id == self.local_id:
                continue
            progress = self.slaves.get(broker_id)
            if progress is None or progress.ack_offset < 0:
                return current
            candidate = min(candidate, progress.ack_offset)
        return max(current, candidate)

    def in_sync_count(self) -> int:
        """Members of the approved set (the master included)."""
        return len(self.state.members)
