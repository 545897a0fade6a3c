"""CommitLog replication, byte-compatible with RocketMQ 5 controller mode (``AutoSwitchHAService``).

The cluster layer drives one :class:`ReplicaController` per replicated store (see
docs/replication.md, "the store's HA API"). Layout:

* :mod:`store.ha.frames`: the four wire frames, declared once;
* :mod:`store.ha.epoch_file`: ``epochFileCheckpoint`` and the consistent-point rule;
* :mod:`store.ha.truncation`: the one truncation procedure, crash-safe;
* :mod:`store.ha.sync_state`: the in-sync set and the confirm offset (pure);
* :mod:`store.ha.master`, :mod:`store.ha.connection`: the master's side;
* :mod:`store.ha.slave`: the slave's side;
* :mod:`store.ha.controller`: roles, fencing, status.
"""

from store.ha.config import HAConfig, ReplicationMode
from store.ha.controller import ReplicaController
from store.ha.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFile, find_consistent_point
from store.ha.errors import (
    EpochFileCorrupt,
    EpochNotIncreasing,
    HAError,
    HAProtocolError,
    NoConsistentPoint,
    SlaveTooFarBehind,
    StaleEpoch,
    StaleEpochFrame,
    StaleMaster,
)
from store.ha.status import ReplicaStatus, ReplicationStatus, Role, SlaveStatus, SyncState
from store.ha.sync_state import InMemorySyncStateAuthority, SyncStateAuthority
from store.ha.tls import HATls, IdentityCheck, PeerRefused, certificate_identity
from store.ha.truncation import TruncationReport, truncate_replica

__all__ = [
    "EPOCH_FILE_NAME",
    "EpochEntry",
    "EpochFile",
    "EpochFileCorrupt",
    "EpochNotIncreasing",
    "HAConfig",
    "HAError",
    "HAProtocolError",
    "HATls",
    "IdentityCheck",
    "InMemorySyncStateAuthority",
    "NoConsistentPoint",
    "PeerRefused",
    "ReplicaController",
    "ReplicaStatus",
    "ReplicationMode",
    "ReplicationStatus",
    "Role",
    "SlaveStatus",
    "SlaveTooFarBehind",
    "StaleEpoch",
    "StaleEpochFrame",
    "StaleMaster",
    "SyncState",
    "SyncStateAuthority",
    "TruncationReport",
    "certificate_identity",
    "find_consistent_point",
    "truncate_replica",
]
