"""A replica group of two broker processes (a master and its slave, in sync) on a
:class:`~tests.support.cluster.ProcessCluster`, for the failover tests of the clients.

    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1", args=SYNC_ARGS)
        pair.master.kill()
        pair.wait_led_by(pair.slave)
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support.cluster import ProcessBroker, ProcessCluster
from tests.support.waiting import wait_until

#: Acknowledged once both members hold it; a lone survivor still takes writes.
SYNC_ARGS = ("--operators", "off", "--replication", "sync", "--min-insync", "1")


@dataclass
class ReplicaPair:
    cluster: ProcessCluster
    name: str
    master: ProcessBroker
    slave: ProcessBroker

    @classmethod
    def started(
        cls, cluster: ProcessCluster, name: str, *, args: Sequence[str] = SYNC_ARGS, kafka: bool = False
    ) -> ReplicaPair:
        """``{name}-a`` first (it leads), then ``{name}-b``; returns once both are in sync."""
        first = cluster.add(name, ha=True, kafka=kafka, args=args, member=f"{name}-a")
        pair = cls(cluster, name, first, first)
        wait_until(lambda: pair.roles_seen_by(first).get(first.url) == "master", 60, f"{name}-a to lead")
        pair.slave = cluster.add(name, ha=True, kafka=kafka, args=args, member=f"{name}-b")
        wait_until(
            lambda: (
                sorted(pair.roles_seen_by(first).values()) == ["master", "slave"]
                and len(pair.group_seen_by(first).get("in_sync") or ()) == 2
            ),
            60,
            f"{name}-b in sync",
        )
        return pair

    def group_seen_by(self, broker: ProcessBroker) -> dict[str, Any]:
        """``GET /cluster``'s entry of the group as ``broker`` answers it (``{}``: no answer)."""
        with contextlib.suppress(httpx.HTTPError, StopIteration, ValueError):
            answer = httpx.get(f"{broker.url}/cluster", timeout=5).json()
            entry: dict[str, Any] = next(b for b in answer["brokers"] if b["name"] == self.name)
            return entry
        return {}

    def roles_seen_by(self, broker: ProcessBroker) -> dict[str, str]:
        """Member HTTP address -> role, as ``broker`` reports them."""
        return {m["http"]: m["role"] for m in self.group_seen_by(broker).get("members") or ()}

    def wait_led_by(self, broker: ProcessBroker, timeout_s: float = 60) -> None:
        """Until ``broker`` reports itself the group's master and the others see it too."""
        wait_until(
            lambda: self.roles_seen_by(broker).get(broker.url) == "master",
            timeout_s,
            f"{broker.url} to lead {self.name}",
        )
