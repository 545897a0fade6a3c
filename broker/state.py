"""The objects one running HTTP broker shares between its requests (``app.state.broker``)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from broker.auth import TokenTable
from broker.coalescer import ProduceCoalescer
from broker.config import ServerConfig
from broker.longpoll import ArrivalHub
from broker.metrics import BrokerMetrics
from broker.operators import OperatorBoard
from broker.security import UserTable
from cluster import ClusterNode
from store import MessageStore


class KafkaMemberView(Protocol):
    """A member of a Kafka consumer group, as the gateway's coordinator describes it."""

    @property
    def member_id(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...


class KafkaGroupView(Protocol):
    """A Kafka consumer group known to the gateway's coordinator (members live only there)."""

    @property
    def group_id(self) -> str: ...
    @property
    def state(self) -> enum.Enum: ...
    @property
    def protocol_name(self) -> str: ...
    @property
    def members(self) -> Sequence[KafkaMemberView]: ...


@dataclass
class Broker:
    """Opened by the app's lifespan; companions (e.g. a Kafka gateway) receive it too."""

    config: ServerConfig
    store: MessageStore
    hub: ArrivalHub
    metrics: BrokerMetrics
    #: Group commit of single-message produces.
    producer: ProduceCoalescer
    #: ``None`` when auth is off.
    tokens: TokenTable | None
    #: The users file (``None`` when auth is off): brokers' identities for peer calls
    #: (:func:`broker.peer_identity.resolve_principal`).
    users: UserTable | None = None
    #: Relocation publishing and the status of the stateful operators.
    operators: OperatorBoard | None = None
    #: Set by a running Kafka gateway: its coordinator's groups. Call on the event loop.
    kafka_groups: Callable[[], Sequence[KafkaGroupView]] | None = None
    #: The console's chart sampler (:class:`ingest_api.console.samples.Sampler`) once running.
    samples: Any = None
    #: This broker's membership when it runs in a cluster (``sparkmq serve --cluster``).
    cluster: ClusterNode | None = None
    #: Pooled HTTP clients to the other brokers (forwarding and fan-out), in cluster mode.
    peers: Any = None
    #: Forwarded single produces, batched per owner (:class:`broker.forwarding.ForwardCoalescer`).
    forwarder: Any = None
    #: Where produced messages go in a cluster (:class:`broker.routing.QueuePlanner`).
    planner: Any = None
    #: The store's HA service (``store.ha.ReplicaController``) of a replica group member.
    replica: Any = None
    #: Its role in the group (:class:`cluster.replica_group.ReplicaGroup`).
    replica_group: Any = None
    #: Keeps local topics in step with the routes (:class:`cluster.local_sync.LocalTopicSync`).
    local_topics: Any = None
    #: POP consumption (:class:`broker.pop.PopService`): one per store, shared by every door.
    pop: Any = None
    #: Set by a running Kafka gateway in a cluster: answers ``POST /kafka/peer/{op}``
    #: (``handle(op, body) -> bytes``, :class:`ingest_api.kafka.txn_peers.PeerService`).
    kafka_peer: Any = None

    @property
    def name(self) -> str | None:
        """The broker name in cluster mode, else ``None``."""
        return self.cluster.name if self.cluster is not None else None
