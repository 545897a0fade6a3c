"""``HAConfig``: one replica's replication settings, frozen and validated.

Defaults follow RocketMQ's ``MessageStoreConfig`` where it has the setting (named in each
comment); units are in the field names. The store's own settings (flush mode, file sizes) stay
in :class:`~store.config.StoreConfig`; every replica of a group must use the same CommitLog
file size.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from store.errors import InvalidArgument
from store.ha.frames import MAX_TRANSFER_BODY
from store.ha.tls import HATls

MIB = 1 << 20


class ReplicationMode(enum.Enum):
    """When a produce is answered (``--replication``)."""

    #: Once the master has it (RocketMQ ASYNC_MASTER); readers still see only replicated data.
    ASYNC = "async"
    #: Once every member of the in-sync set holds it (RocketMQ controller mode with
    #: ``allAckInSyncStateSet=true``), under the flush mode in force.
    SYNC = "sync"


@dataclass(frozen=True)
class HAConfig:
    """Replication settings of one replica (see docs/replication.md)."""

    #: This replica's id in its group (RocketMQ ``brokerId``; sent as ``slaveBrokerId``).
    broker_id: int
    #: Where the HA service listens (``--ha-port``; 0: any free port, for tests).
    listen_host: str = "127.0.0.1"
    listen_port: int = 0
    replication: ReplicationMode = ReplicationMode.ASYNC
    #: Writes are refused (nothing appended) while the in-sync set, master included, is
    #: smaller than this (``--min-insync``; RocketMQ ``minInSyncReplicas``).
    min_insync: int = 1
    #: SYNC: how long a produce waits for the in-sync set (RocketMQ ``slaveTimeout``).
    ack_timeout_ms: int = 3000
    #: Largest transfer frame body. 1 MiB keeps catch-up well above 200 MB/s here; at most
    #: 4 MiB minus the header so RocketMQ slaves can read it (RocketMQ
    #: ``haTransferBatchSize`` defaults to 32 KiB).
    transfer_batch_bytes: int = MIB
    #: Idle heartbeat period, both ways (``haSendHeartbeatInterval``).
    heartbeat_interval_ms: int = 5000
    #: A connection that reads nothing for this long is closed (``haHousekeepingInterval``).
    housekeeping_interval_ms: int = 20_000
    #: A slave that has not caught up for this long leaves the in-sync set
    #: (``haMaxTimeSlaveNotCatchup``).
    max_time_slave_not_catchup_ms: int = 15_000
    #: How often the master re-examines the in-sync set (besides after acks).
    sync_state_check_interval_ms: int = 1000
    #: A slave reconnects after failures with a back-off doubling from min to max.
    reconnect_min_ms: int = 100
    reconnect_max_ms: int = 5000
    connect_timeout_ms: int = 3000
    #: A new (empty) slave starts at the master's last CommitLog file (``syncFromLastFile``).
    sync_from_last_file: bool = False
    #: This replica never enters the in-sync set (``asyncLearner``).
    async_learner: bool = False
    #: Mutual TLS with the cluster CA on the replication port (:mod:`store.ha.tls`); ``None``:
    #: plain TCP (a trusted network only).
    tls: HATls | None = None

    def validate(self) -> HAConfig:
        """Return ``self`` or raise :class:`InvalidArgument` naming the bad field."""
        checks: list[tuple[bool, str]] = [
            (self.broker_id >= 0, "broker_id must be >= 0"),
            (0 <= self.listen_port < 65536, "listen_port must be in [0, 65536)"),
            (self.min_insync >= 1, "min_insync must be >= 1 (the master counts)"),
            (self.ack_timeout_ms > 0, "ack_timeout_ms must be > 0"),
            (
                0 < self.transfer_batch_bytes <= MAX_TRANSFER_BODY,
                f"transfer_batch_bytes must be in (0, {MAX_TRANSFER_BODY}] (a RocketMQ slave reads 4 MiB)",
            ),
            (self.heartbeat_interval_ms > 0, "heartbeat_interval_ms must be > 0"),
            (
                self.housekeeping_interval_ms > self.heartbeat_interval_ms,
                "housekeeping_interval_ms must exceed heartbeat_interval_ms",
            ),
            (self.max_time_slave_not_catchup_ms > 0, "max_time_slave_not_catchup_ms must be > 0"),
            (self.sync_state_check_interval_ms > 0, "sync_state_check_interval_ms must be > 0"),
            (
                0 < self.reconnect_min_ms <= self.reconnect_max_ms,
                "need 0 < reconnect_min_ms <= reconnect_max_ms",
            ),
            (self.connect_timeout_ms > 0, "connect_timeout_ms must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(f"invalid HAConfig: {message}")
        if self.tls is not None:
            self.tls.validate()
        return self

    def with_changes(self, **changes: object) -> HAConfig:
        return replace(self, **changes).validate()  # type: ignore[arg-type]
