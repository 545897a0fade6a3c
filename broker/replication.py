"""What a slave copies from its master besides the CommitLog (RocketMQ's ``SlaveSynchronize``).

Consumer offsets need no copy any more: a commit is a CommitLog record
(``rmq_sys_CONSUMER_OFFSETS``, :mod:`store.write.offset_log`), replicated and acknowledged like
a message and applied to every member's offset table as it is dispatched, so a promoted slave
serves every acknowledged commit at once. Nor does the Kafka transaction coordinator's state:
its records (``rmq_sys_KAFKA_TXN_STATE``) are replayed by the gateway of a promoted slave
(:mod:`ingest_api.kafka.txn_reload`).

What is still copied is the delay resolver's progress (``delayOffset.json``): a slave pulls it
from its master every :data:`SYNC_INTERVAL_S` (RocketMQ: every 60 s). It is a position in
``SCHEDULE_TOPIC_XXXX`` that the operator job advances as it relocates due messages; losing
up to a second of it after a failover makes the new master relocate those messages again
(at-least-once delivery of a delayed message, as RocketMQ). Topic configuration and the
groups' settings live in ZooKeeper and need no copy.

The master answers ``GET /replica/metadata`` (internal, left out of the OpenAPI document;
:mod:`ingest_api.http.routers.replica`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from broker.peers import PeerUnavailable
from broker.state import Broker
from broker.threads import run_blocking
from cluster import ClusterNode
from store import MessageStore

log = logging.getLogger("sparkmq.replication")

SYNC_INTERVAL_S = 1.0


def metadata_snapshot(store: MessageStore) -> dict[str, Any]:
    """The side tables of this store a slave copies: the delay offsets."""
    return {"delay_offsets": {str(level): o for level, o in store.delay_offsets().items()}}


def apply_snapshot(store: MessageStore, snapshot: dict[str, Any]) -> int:
    """Apply a master's snapshot; the number of tables that changed (0 or 1). Consumer offsets
    a master of an older version still sends are ignored: they arrive through the log."""
    delays = {int(level): int(o) for level, o in snapshot.get("delay_offsets", {}).items()}
    if delays and delays != store.delay_offsets():
        store.set_delay_offsets(delays)
        return 1
    return 0


def replica_status(broker: Broker) -> dict[str, Any] | None:
    """This member's replication status for ``GET /cluster`` (``None`` without replication)."""
    ha = broker.replica
    if ha is None:
        return None
    status = ha.status()
    group = broker.replica_group
    return {
        "member_id": status.broker_id,
        "role": status.role.name.lower(),
        "epoch": status.epoch,
        "epoch_start_offset": status.epoch_start_offset,
        "max_offset": status.max_offset,
        "confirm_offset": status.confirm_offset,
        "in_sync": sorted(status.in_sync),
        "master_address": status.master_address or None,
        "connected": status.connected,
        "slaves": [
            {
                "member_id": slave.broker_id,
                "ack_offset": slave.ack_offset,
                "lag_bytes": slave.lag_bytes,
                "in_sync": slave.in_sync,
            }
            for slave in status.slaves
        ],
        "truncations": status.truncations,
        "truncated_bytes": status.truncated_bytes,
        "stale_frames_rejected": status.stale_frames_rejected,
        "role_changes": group.describe() if group is not None else None,
        "last_error": status.last_error or None,
    }


class SlaveMetadataFollower:
    """While this member is a slave, copies its master's delay offsets every second."""

    def __init__(self, broker: Broker, node: ClusterNode, replica: Any) -> None:
        self._broker = broker
        self._node = node
        self._replica = replica
        self._task: asyncio.Task[None] | None = None
        self.copies = 0
        self.last_error = ""

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SYNC_INTERVAL_S)
            if self._node.serving:
                continue
            master = self._node.view.master_of(self._node.name)
            if master is None:
                continue
            try:
                answer = await self._broker.peers.request(master, self._node.name, "GET", "/replica/metadata")
                if answer.status_code == 200:
                    await run_blocking(apply_snapshot, self._broker.store, answer.json())
                    self.copies += 1
            except (PeerUnavailable, ValueError) as exc:
                self.last_error = str(exc)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("copying the master's delay offsets failed: %s", self.last_error)
