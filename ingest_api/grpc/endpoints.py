"""Where each broker's gRPC door listens, so that QueryRoute can name every broker name's door.

A lone broker answers with its own door. In a cluster each member publishes its door's
advertised ``host:port`` as a cluster-wide setting of kind :data:`GRPC_DOORS`, named by its
member id (``ClusterNode.put_setting``: a ZooKeeper node every broker watches), and every
broker keeps the table of them (:class:`DoorDirectory`). A route names, for each broker name,
the door of its current master (``BrokerGroup.addresses``: the master, else the last member
registered), so a failover moves clients to the new master's door at their next route refresh.
A member that never ran a door is simply absent: its queues are left out of routes.

The records outlive their member (a restarted member overwrites its own); they are a few
bytes each and only the master's is ever read.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from cluster import ClusterNode

log = logging.getLogger(__name__)

#: The setting kind under which members publish their gRPC doors.
GRPC_DOORS = "grpc_doors"


@dataclass(frozen=True, slots=True)
class DoorAddress:
    host: str
    port: int


class DoorDirectory:
    """member id -> the gRPC door it advertises (module doc). Thread-safe."""

    def __init__(self, own: DoorAddress, node: ClusterNode | None = None) -> None:
        self.own = own
        self._node = node
        self._doors: dict[int, DoorAddress] = {}
        self._lock = threading.Lock()

    def publish(self) -> None:
        """Publish this member's door and watch the others' (blocking: ZooKeeper). A lone
        broker publishes nothing. Raises the cluster's error when ZooKeeper is unreachable."""
        node = self._node
        if node is None:
            return
        member = node.member
        if member is None:
            raise RuntimeError("the broker has not joined its cluster yet")
        with self._lock:
            self._doors[member.member_id] = self.own
        document = {"broker_name": node.name, "host": self.own.host, "port": self.own.port}
        node.put_setting(GRPC_DOORS, str(member.member_id), document)
        node.watch_settings(GRPC_DOORS, self._on_setting)

    def _on_setting(self, name: str, document: dict[str, Any] | None) -> None:
        try:
            member_id = int(name)
            address = None if document is None else DoorAddress(str(document["host"]), int(document["port"]))
        except (KeyError, TypeError, ValueError):
            log.warning("gRPC door record %r is malformed: %r (ignored)", name, document)
            return
        with self._lock:
            if address is None:
                self._doors.pop(member_id, None)
            else:
                self._doors[member_id] = address

    def door_of(self, member_id: int) -> DoorAddress | None:
        with self._lock:
            return self._doors.get(member_id)

    def serving_door(self, broker_name: str) -> DoorAddress | None:
        """The door clients use for ``broker_name``'s queues: its master's (module doc), else
        ``None``. A lone broker: its own door, whatever the name."""
        node = self._node
        if node is None:
            return self.own
        member = node.view.group(broker_name).addresses
        return None if member is None else self.door_of(member.member_id)
