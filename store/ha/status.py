"""Values the replication layer answers with: roles, acknowledgement statuses, status reports.

Expected outcomes are values (a write that timed out waiting for the in-sync set is
``FLUSH_SLAVE_TIMEOUT``); faults are the exceptions of :mod:`store.ha.errors`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Role(enum.Enum):
    """What a replica does now."""

    #: No role yet (just opened, or between roles): no writes, serves reads below its confirm offset.
    STANDBY = "standby"
    MASTER = "master"
    SLAVE = "slave"
    #: Was told to stop at once (coordination session suspended): no writes, no acknowledgements,
    #: no replication, until the next role change.
    FENCED = "fenced"


class ReplicationStatus(enum.Enum):
    """Outcome of waiting for a write to be replicated (RocketMQ ``PutMessageStatus`` names)."""

    PUT_OK = "PUT_OK"
    #: SYNC: the in-sync set did not all hold it within the ack timeout (it is stored on the master).
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    #: Fewer in-sync replicas than ``min_insync`` (RocketMQ 5: IN_SYNC_REPLICAS_NOT_ENOUGH).
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    #: This replica is not (or no longer) the master.
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SyncState:
    """The in-sync set (RocketMQ ``SyncStateSet``) as the authority last approved it."""

    #: Broker ids, the master's included.
    members: frozenset[int]
    #: The epoch of the master that owns this set.
    master_epoch: int
    #: Version of the set; every approved change adds one (``syncStateSetEpoch``).
    set_epoch: int


@dataclass(frozen=True, slots=True)
class SlaveStatus:
    """One connected slave, as its master sees it."""

    broker_id: int
    address: str
    #: Last CommitLog offset it acknowledged (-1: none yet).
    ack_offset: int
    #: Master max offset minus ``ack_offset``.
    lag_bytes: int
    in_sync: bool
    async_learner: bool
    #: Where the master sends from next.
    transfer_offset: int
    #: Milliseconds since it was last caught up (-1: never).
    not_caught_up_ms: int


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """Everything ``GET /cluster`` and ``/metrics`` show about one replica."""

    broker_id: int
    role: Role
    #: The newest epoch in the epoch file (-1: none).
    epoch: int
    epoch_start_offset: int
    max_offset: int
    confirm_offset: int
    #: Where the HA service listens ("host:port"; "" before ``start``).
    ha_address: str
    #: Master: the approved in-sync set (and a proposal awaiting the authority).
    in_sync: frozenset[int]
    sync_state_epoch: int
    pending_in_sync: frozenset[int] | None
    slaves: tuple[SlaveStatus, ...]
    #: Slave: the master it follows and whether it is connected to it.
    master_address: str
    connected: bool
    #: Counters since start.
    truncations: int
    truncated_bytes: int
    stale_frames_rejected: int
    sync_state_refusals: int
    #: The last failure of a replication thread or role change ("" when none).
    last_error: str
