"""Brokers of one cluster served from threads of the test process (one store and one ZooKeeper
session each): cheap enough for the door tests. Kill tests use real processes instead."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from broker.config import ServerConfig
from cluster import ClusterConfig, parse_cluster_address
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.network import free_port
from tests.support.stores import light_config
from tests.support.waiting import wait_until


def cluster_broker(zk_url: str, name: str, store_dir: Path, **server: object) -> RunningBroker:
    port = free_port()
    membership = ClusterConfig(
        address=parse_cluster_address(zk_url),
        broker_name=name,
        advertise_host="127.0.0.1",
        http_port=port,
        session_timeout_ms=2000,
        default_queues=4,
    )
    config = ServerConfig(
        store=light_config(store_dir, auto_create_topics=False, store_port=port),
        port=port,
        cluster=membership,
        **server,  # type: ignore[arg-type]
    )
    return start_broker(config, fixed_port=port)


@dataclass
class InProcessCluster:
    zk_url: str
    root: Path
    brokers: dict[str, RunningBroker] = field(default_factory=dict)

    def start(self, name: str, **server: object) -> RunningBroker:
        running = cluster_broker(self.zk_url, name, self.root / name, **server)
        self.brokers[name] = running
        return running

    def http(self, name: str) -> httpx.Client:
        return self.brokers[name].client()

    def wait_converged(self, live: int, timeout_s: float = 10.0) -> None:
        """Every running broker sees ``live`` live brokers."""
        for name, running in self.brokers.items():
            with running.client() as http:
                wait_until(
                    lambda http=http: sum(b["alive"] for b in http.get("/cluster").json()["brokers"]) == live,
                    timeout_s,
                    f"{name} to see {live} live brokers",
                )

    def stop(self, name: str) -> None:
        self.brokers.pop(name).stop()

    def stop_all(self) -> None:
        for name in list(self.brokers):
            self.stop(name)
