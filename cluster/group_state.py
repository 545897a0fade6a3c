"""A replica group's state in ZooKeeper, and the rules that change it: pure values and functions.

Brokers started with the same ``--broker-name`` (and ``--ha-port``) form one replica group. Its
state is one persistent znode, ``/brokers/<name>/state``, written only by versioned
compare-and-set (Kafka's controller did the same with ``CheckOp`` on the controller epoch)::

    {"master": 7, "epoch": 3, "sync_state_set": [7, 9], "set_epoch": 5}

* ``master``: the member id that takes writes (``null``: none, e.g. no in-sync member is alive);
* ``epoch``: bumped at every election; it is RocketMQ 5's master epoch (the HA frames carry it,
  the epoch file records where each starts) and Kafka's leader epoch;
* ``sync_state_set``: RocketMQ's SyncStateSet (Kafka's ISR), the members that hold every
  acknowledged message; only they may be elected (unless ``--unclean-failover``);
* ``set_epoch``: the set's version; the master proposes changes against it (RocketMQ's
  ``AlterSyncStateSet`` is refused unless both epochs match, ``ReplicasInfoManager`` 143-155).

Election rule (RIP-44's ``DefaultElectPolicy``): keep a live master; otherwise elect, among the
live members of the in-sync set, the one with the highest ``(last epoch, max offset)``, lowest
member id on a tie; new master epoch = epoch + 1, the set becomes ``{master}`` with
``set_epoch + 1``. Every live member of the set holds every acknowledged byte, so whichever
wins loses nothing acknowledged; the ranking only saves the others a longer catch-up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from cluster.errors import ClusterError


class CorruptGroupState(ClusterError):
    code = "corrupt_group_state"


class _StateJson(msgspec.Struct, forbid_unknown_fields=False):
    master: int | None
    epoch: int
    sync_state_set: list[int]
    set_epoch: int


@dataclass(frozen=True, slots=True)
class GroupState:
    """``/brokers/<name>/state`` and the znode version it was read at."""

    master: int | None
    epoch: int
    sync_state_set: frozenset[int]
    set_epoch: int
    version: int = -1

    def to_json(self) -> bytes:
        return msgspec.json.encode(
            _StateJson(self.master, self.epoch, sorted(self.sync_state_set), self.set_epoch)
        )

    @staticmethod
    def from_json(raw: bytes, version: int = -1) -> GroupState:
        try:
            value = msgspec.json.decode(raw, type=_StateJson)
        except msgspec.DecodeError as exc:
            raise CorruptGroupState(f"group state {raw[:200]!r}: {exc}") from None
        return GroupState(
            value.master, value.epoch, frozenset(value.sync_state_set), value.set_epoch, version
        )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live member as an election sees it: its last epoch and max CommitLog offset."""

    member_id: int
    last_epoch: int
    max_offset: int


def founding_state(member_id: int) -> GroupState:
    """The state a group's first member writes (create, never overwrite)."""
    return GroupState(master=member_id, epoch=1, sync_state_set=frozenset({member_id}), set_epoch=1)


def elect(state: GroupState, live: Mapping[int, Candidate], *, unclean: bool = False) -> GroupState | None:
    """The state after an election, or ``None`` when nothing should change: the master is
    alive, or no member may be elected (no live in-sync member, and ``unclean`` is off)."""
    if state.master is not None and state.master in live:
        return None
    electable = [c for c in live.values() if c.member_id in state.sync_state_set]
    if not electable and unclean:
        electable = list(live.values())
    if not electable:
        return None
    winner = min(electable, key=lambda c: (-c.last_epoch, -c.max_offset, c.member_id))
    return GroupState(
        master=winner.member_id,
        epoch=state.epoch + 1,
        sync_state_set=frozenset({winner.member_id}),
        set_epoch=state.set_epoch + 1,
    )


def restart_as_master(state: GroupState, member_id: int) -> GroupState:
    """A new epoch for a master that lost its session and came back still named master (no one
    else was electable meanwhile): every time a broker starts to lead is a new epoch."""
    return GroupState(
        master=member_id,
        epoch=state.epoch + 1,
        sync_state_set=frozenset({member_id}),
        set_epoch=state.set_epoch + 1,
    )


def alter_sync_state_set(
    state: GroupState, proposer: int, members: frozenset[int], master_epoch: int, set_epoch: int
) -> GroupState | None:
    """The state with the master's proposed in-sync set, or ``None`` when the proposal is stale
    (the proposer is no longer master of ``master_epoch``, or the set moved past ``set_epoch``)
    or drops the master itself."""
    if state.master != proposer or state.epoch != master_epoch or state.set_epoch != set_epoch:
        return None
    if proposer not in members:
        return None
    return GroupState(state.master, state.epoch, members, set_epoch + 1)
