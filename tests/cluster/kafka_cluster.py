"""In-process cluster brokers with a Kafka gateway each (``sparkmq serve --cluster --kafka-port``
served from threads of the test process): the brokers' HTTP door, their ZooKeeper sessions and
their Kafka listeners are real; only the process boundary is missing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.config import ServerConfig
from cluster import ClusterConfig, parse_cluster_address
from ingest_api.kafka import GatewayConfig
from ingest_api.kafka.companion import KafkaCompanion
from tests.cluster.inprocess import InProcessCluster
from tests.ingest.conftest import RunningBroker, start_broker
from tests.kafka.conftest import TEST_REBALANCE_DELAY_MS
from tests.support.network import free_port
from tests.support.stores import light_config


def kafka_gateway_config() -> GatewayConfig:
    """The gateway tests' settings (short rebalance delay and session timeouts)."""
    return GatewayConfig(
        initial_rebalance_delay_ms=TEST_REBALANCE_DELAY_MS,
        coordinator_tick_ms=20,
        min_session_timeout_ms=500,
    ).validate()


def kafka_cluster_broker(
    zk_url: str, name: str, store_dir: Path, http_port: int, kafka_port: int, **server: object
) -> RunningBroker:
    membership = ClusterConfig(
        address=parse_cluster_address(zk_url),
        broker_name=name,
        advertise_host="127.0.0.1",
        http_port=http_port,
        kafka_port=kafka_port,
        session_timeout_ms=2000,
        default_queues=6,
    )
    config = ServerConfig(
        store=light_config(store_dir, auto_create_topics=False, store_port=http_port),
        port=http_port,
        cluster=membership,
        **server,  # type: ignore[arg-type]
    )
    companion = KafkaCompanion(port=kafka_port, config=kafka_gateway_config())
    return start_broker(config, companions=[companion], fixed_port=http_port)


@dataclass
class KafkaCluster(InProcessCluster):
    """:class:`InProcessCluster` whose brokers also speak Kafka; restartable on the same ports."""

    ports: dict[str, tuple[int, int]] = field(default_factory=dict)

    def start(self, name: str, **server: object) -> RunningBroker:
        http_port, kafka_port = self.ports.setdefault(name, (free_port(), free_port()))
        running = kafka_cluster_broker(self.zk_url, name, self.root / name, http_port, kafka_port, **server)
        self.brokers[name] = running
        return running

    def bootstrap(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name][1]}"

    def kafka_port(self, name: str) -> int:
        return self.ports[name][1]
