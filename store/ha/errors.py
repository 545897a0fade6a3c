"""Faults of the replication layer, each named after what happened.

The refusals a producer sees (not master, fenced, too few in-sync replicas, a replication
timeout) and the faults of :meth:`MessageStore.append_replicated` are the store's own, in
:mod:`store.errors`; these are the HA protocol's and the role changes'. None is ever only
logged: the HA threads record the last one in :meth:`ReplicaController.status` and count it.
"""

from __future__ import annotations

from store.errors import CorruptStore, StoreError


class HAError(StoreError):
    """A fault in CommitLog replication."""

    code = "ha_error"


class HAProtocolError(HAError):
    """The peer sent bytes that are not a frame of the AutoSwitch HA protocol (unknown state,
    a body size that is negative or not a whole number of epoch entries, a frame larger than
    the receive buffer). The connection is dropped."""

    code = "ha_protocol"


class EpochFileCorrupt(CorruptStore):
    """``epochFileCheckpoint`` does not check out (count, CRC, entry syntax or order)."""

    code = "epoch_file_corrupt"


class EpochNotIncreasing(HAError):
    """An epoch entry was appended whose epoch or start offset is not larger than the last
    entry's (RocketMQ ``EpochFileCache.appendEntry`` refuses it too)."""

    code = "epoch_not_increasing"


class StaleEpoch(HAError):
    """A role change names an epoch older than the newest this replica has seen (or a master
    epoch this replica did not lead): the cluster layer acted on an outdated view."""

    code = "stale_epoch"


class StaleEpochFrame(HAError):
    """A transfer frame carried an epoch older than the newest this slave has seen: a deposed
    master is still talking. The frame is rejected and the connection dropped."""

    code = "stale_epoch_frame"


class StaleMaster(HAError):
    """A master answered the handshake with an epoch below the one the cluster layer named
    in ``become_slave``: it is a deposed master. The slave does not replicate from it."""

    code = "stale_master"


class NoConsistentPoint(HAError):
    """The local epochs and the master's share no epoch with the same start offset (or the
    local log has data but no epoch history): truncating could not make this replica a prefix
    of the master. The replica needs to be wiped and rebuilt."""

    code = "no_consistent_point"


class SlaveTooFarBehind(HAError):
    """The slave asked for CommitLog bytes the master no longer has (retention deleted them):
    it cannot catch up by replication and must be wiped and rebuilt (RocketMQ #3388)."""

    code = "slave_too_far_behind"
