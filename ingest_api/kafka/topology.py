"""The Kafka view of a sparkmq cluster: nodes, partition leaders and coordinators.

Pure functions over a :class:`cluster.ClusterView` (tested without ZooKeeper), so every broker
answers Metadata and FindCoordinator the same way from the same routes:

* **Nodes**: one Kafka node per broker name that serves Kafka (its member registered a Kafka
  address); node id = ``MemberInfo.member_id``, host/port = ``MemberInfo.kafka``. Metadata lists
  the *live* ones.
* **Leaders**: partition *p* of a topic = queue id *p*; its leader is the live master of the
  broker name that owns the queue. An owner that is down, or that runs without a Kafka listener,
  gives no leader (Metadata: LEADER_NOT_AVAILABLE, leader -1).
* **Replicas**: a broker name that is a replica group shows its members as the partition's
  ``replicas`` (node id = member id, the numbering of the nodes above; the master first, then
  the others by id) and its in-sync set (``/brokers/<name>/state``'s ``sync_state_set``, the
  live ones) as the ``isr``, so ``kcat -L`` shows a group of two as replication factor 2. A
  member registered without a Kafka listener is listed all the same: the replica is there,
  only no Kafka client can connect to it. A broker without replicas is its own only replica.
* **Coordinators**: like Kafka's ``abs(key.hashCode) % partitions`` of ``__consumer_offsets`` /
  ``__transaction_state``, with the sorted names of the *known* Kafka brokers (live or dead: a
  broker name once registered stays known) as the partitions: ``sharding_queue(key, N)``, the
  store's own ``abs(javaHash) % N``. A broker dying therefore moves no coordinator; what happens
  then depends on the kind:

  - a **group** coordinator keeps nothing durable (membership is in memory and committed
    offsets live at each queue's owner), so while its broker is down the group is hashed over
    the *live* Kafka brokers instead, and moves back when the broker returns (members get
    NOT_COORDINATOR and rejoin);
  - a **transaction** coordinator owns durable state in its store (producer ids and epochs,
    the participants and decisions of open transactions), so while its broker is down
    FindCoordinator answers COORDINATOR_NOT_AVAILABLE (clients retry) — Kafka's behaviour when
    the leader of a ``__transaction_state`` partition with replication factor 1 is offline.

  Adding a broker changes N and so moves coordinators (groups rejoin; see docs/kafka_gateway.md
  for transactions open at that moment).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from cluster import ClusterView, MemberInfo
from ingest_api.kafka.names import to_store
from store import sharding_queue

#: Cluster id when the chroot is the ZooKeeper root.
DEFAULT_CLUSTER_ID = "sparkmq"


class CoordinatorKind(enum.Enum):
    """FindCoordinator's key types."""

    GROUP = 0
    TRANSACTION = 1


@dataclass(frozen=True, slots=True)
class KafkaNode:
    """A broker as Kafka clients see it."""

    node_id: int
    host: str
    port: int
    broker_name: str


@dataclass(frozen=True, slots=True)
class CoordinatorChoice:
    """Whose key it is: ``broker_name`` (``None`` when no broker serves Kafka) and its live node
    (``None`` while that broker is down: COORDINATOR_NOT_AVAILABLE)."""

    broker_name: str | None
    node: KafkaNode | None


def cluster_id(chroot: str) -> str:
    """The Kafka cluster id of a cluster: its ZooKeeper chroot, ``/`` -> ``-`` (``/prod/mq`` is
    ``prod-mq``), the same on every broker."""
    return chroot.strip("/").replace("/", "-") or DEFAULT_CLUSTER_ID


def node_of(member: MemberInfo | None) -> KafkaNode | None:
    """The Kafka node of a member, ``None`` without a Kafka listener."""
    if member is None or member.kafka_host_port is None:
        return None
    host, port = member.kafka_host_port
    return KafkaNode(member.member_id, host, port, member.broker_name)


def live_nodes(view: ClusterView) -> list[KafkaNode]:
    """The live masters that serve Kafka, by node id (Metadata's ``brokers``)."""
    nodes = (node_of(view.master_of(name)) for name in view.live_brokers())
    return sorted((n for n in nodes if n is not None), key=lambda n: n.node_id)


def known_kafka_brokers(view: ClusterView) -> list[str]:
    """Sorted names of every broker whose master or last registration has a Kafka address."""
    return sorted(
        name
        for name, group in view.groups.items()
        if (shown := group.addresses) is not None and shown.kafka is not None
    )


def leader(view: ClusterView, topic: str, partition: int) -> KafkaNode | None:
    """The live leader of partition ``partition`` of Kafka topic ``topic``, or ``None``."""
    owner = view.owner(to_store(topic), partition)
    return None if owner is None else node_of(view.master_of(owner))


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """Metadata's replica fields of every partition a broker name owns (node ids)."""

    leader: KafkaNode | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]


def replicas_of(view: ClusterView, owner: str) -> PartitionReplicas:
    """The leader, replicas, in-sync replicas and offline replicas of ``owner``'s partitions
    (see the module docstring). Without a live master the leader is ``None``; the replicas are
    then the live members, the in-sync set and the last registration, all of them but the live
    ones offline."""
    group = view.group(owner)
    leader_node = node_of(group.master)
    live = {m.member_id for m in group.members}
    in_sync = set(group.state.sync_state_set) if group.state is not None else set(live)
    known = live | in_sync
    if not known and group.last_known is not None:
        known = {group.last_known.member_id}
    first = [group.master_id] if group.master_id in known else []
    replicas = tuple(dict.fromkeys([*first, *sorted(known)]))
    isr = tuple(m for m in replicas if m in in_sync and m in live)
    offline = tuple(m for m in replicas if m not in live)
    return PartitionReplicas(leader_node, replicas, isr, offline)


def coordinator(view: ClusterView, key: str, kind: CoordinatorKind) -> CoordinatorChoice:
    """The coordinator of a group id or transactional id (see the module docstring)."""
    known = known_kafka_brokers(view)
    if not known:
        return CoordinatorChoice(None, None)
    name = known[sharding_queue(key, len(known))]
    node = node_of(view.master_of(name))
    if node is not None or kind is CoordinatorKind.TRANSACTION:
        return CoordinatorChoice(name, node)
    live = [n for n in known if node_of(view.master_of(n)) is not None]
    if not live:
        return CoordinatorChoice(name, None)
    fallback = live[sharding_queue(key, len(live))]
    return CoordinatorChoice(fallback, node_of(view.master_of(fallback)))
