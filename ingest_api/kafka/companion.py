"""Run the gateway next to the HTTP API, on the broker's event loop (``sparkmq serve``).

``ingest_api.http.app.create_app(config, companions=[KafkaCompanion(port=9092)])`` starts the
gateway after the store opens and closes it before the store closes. ``sparkmq serve``
registers :func:`serve_companions`, which turns ``--kafka-port`` (off when absent) and
``--kafka-advertised-host`` into a companion.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import Any, Protocol

from cluster import ClusterNode
from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.context import GatewayConfig
from ingest_api.kafka.server import KafkaGateway, start_kafka_gateway
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.topology import cluster_id
from ingest_api.kafka.txn_peers import PeerService
from ingest_api.kafka.txn_reload import catch_up_promotion, follow_promotions, stop_serving_before_promotion
from store import InvalidArgument
from store.publish import TransactionService

log = logging.getLogger(__name__)


class _HasStore(Protocol):
    @property
    def store(self) -> Any: ...


def service_of(broker: _HasStore) -> TransactionService | None:
    """The broker's transaction service (replaced when a replica group's slave is promoted)."""
    board = getattr(getattr(broker, "operators", None), "transactions", None)
    return getattr(board, "service", None)


class KafkaCompanion:
    """A companion factory: ``companion(broker)`` is an async context manager running the gateway.

    ``gateway`` is the running gateway while the broker is up (e.g. to read the bound port
    when ``port=0``).
    """

    def __init__(
        self,
        port: int = 9092,
        host: str = "127.0.0.1",
        advertised_host: str | None = None,
        config: GatewayConfig | None = None,
    ) -> None:
        base = config or GatewayConfig()
        self.config = replace(base, host=host, port=port, advertised_host=advertised_host).validate()
        self.gateway: KafkaGateway | None = None

    def __call__(self, broker: _HasStore) -> AbstractAsyncContextManager[KafkaGateway]:
        return self._run(broker)

    @asynccontextmanager
    async def _run(self, broker: _HasStore) -> AsyncIterator[KafkaGateway]:
        store: KafkaStore = broker.store
        metrics = getattr(broker, "metrics", None)
        service = service_of(broker)  # one transaction service per store
        link, config = self._cluster(broker)
        server_config = getattr(broker, "config", None)
        tls = getattr(server_config, "tls", None)
        if server_config is not None:  # auth on, no TLS, off loopback: refused (--allow-plaintext)
            server_config.check_plaintext(config.host, "Kafka")
        gateway = await start_kafka_gateway(
            store,
            config=config,
            metrics=metrics,
            transactions=service,
            cluster=link,
            auth=getattr(broker, "auth", None),
            ssl_context=None if tls is None else tls.server_context(),
        )
        self.gateway = gateway
        if hasattr(broker, "kafka_groups"):  # the console lists the coordinator's groups
            setattr(broker, "kafka_groups", gateway.context.coordinator.groups)  # noqa: B010
        if link is not None:  # the other brokers' gateways call this one (POST /kafka/peer/{op})
            setattr(broker, "kafka_peer", PeerService(gateway.context))  # noqa: B010
            if getattr(broker, "auth", None) is not None:
                log.warning(
                    "kafka gateway: with --auth-file the other brokers refuse this gateway's calls "
                    "(it sends no token): offsets and transactions of queues on other brokers fail"
                )
        replica_group = getattr(broker, "replica_group", None)
        promoted = begin = None
        if replica_group is not None:  # a promoted slave replays the coordinator's state
            begin = stop_serving_before_promotion(gateway.context)
            replica_group.on_lead_begin.append(begin)
            promoted = follow_promotions(gateway.context, lambda: service_of(broker))
            replica_group.on_lead.append(promoted)
            await catch_up_promotion(gateway.context, service_of(broker))
        try:
            yield gateway
        finally:
            if replica_group is not None and promoted is not None and begin is not None:
                replica_group.on_lead_begin.remove(begin)
                replica_group.on_lead.remove(promoted)
            if link is not None:
                setattr(broker, "kafka_peer", None)  # noqa: B010
            if hasattr(broker, "kafka_groups"):
                setattr(broker, "kafka_groups", None)  # noqa: B010
            self.gateway = None
            await gateway.close()

    def _cluster(self, broker: _HasStore) -> tuple[ClusterLink | None, GatewayConfig]:
        """In cluster mode (``broker.cluster`` set): the link, and the configuration with this
        member's node id, the cluster's id and the Kafka address it registered."""
        node: ClusterNode | None = getattr(broker, "cluster", None)
        if node is None:
            return None, self.config
        member = node.member
        if member is None or member.kafka_host_port is None:
            raise InvalidArgument(
                "the Kafka gateway of a cluster broker needs its Kafka address registered: "
                "start it with --kafka-port"
            )
        host, port = member.kafka_host_port
        link = ClusterLink(node, getattr(broker, "peers"), getattr(broker, "local_topics"))  # noqa: B009
        config = replace(
            self.config,
            node_id=member.member_id,
            cluster_id=cluster_id(node.config.address.chroot),
            advertised_host=host,
            advertised_port=port,
        ).validate()
        return link, config


class _ServeOptions(Protocol):
    @property
    def config(self) -> Any: ...
    @property
    def extra(self) -> Mapping[str, Any]: ...


def serve_companions(options: _ServeOptions) -> list[Callable[[Any], AbstractAsyncContextManager[Any]]]:
    """``sparkmq serve`` hook: one gateway when ``extra["kafka_port"]`` is set, else none.

    Binds the HTTP host unless ``extra["kafka_host"]`` says otherwise.
    """
    port = options.extra.get("kafka_port")
    if port is None:
        return []
    host = str(options.extra.get("kafka_host") or getattr(options.config, "host", "127.0.0.1"))
    advertised = options.extra.get("kafka_advertised_host")
    return [KafkaCompanion(port=int(port), host=host, advertised_host=advertised)]
