"""What the cluster looks like: brokers, their members, and where each queue lives.

Pure values. :class:`ClusterView` is an immutable snapshot the doors read without a lock (the
node swaps in a new one when ZooKeeper reports a change); every question a door asks ("who
owns queue q of topic t", "which queues of t are mine") is a method here, so it is answered
the same way everywhere and tested without ZooKeeper.

The znode values are JSON, encoded and decoded here only (golden tests in
``tests/cluster/test_model.py``)::

    brokers/<name>/members/<member_id>   {"broker_name": "b1", "member_id": 3,
                                          "http": "http://127.0.0.1:8080", "kafka": "127.0.0.1:9092",
                                          "ha": null, "store": "127.0.0.1:8080", "started_ms": ...}
    brokers/<name>                       the last member that registered (same fields): a dead
                                         broker's addresses stay known
    topics/<topic>                       {"queues": ["b1", "b2", "b3", "b1"]}   index = queue id
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from cluster.errors import ClusterError
from cluster.group_state import GroupState

#: Broker names become znode names and appear in JSON and URLs.
BROKER_NAME_PATTERN = r"[A-Za-z0-9_.-]{1,64}"
_BROKER_NAME = re.compile(BROKER_NAME_PATTERN)


class InvalidBrokerName(ClusterError):
    code = "invalid_broker_name"


def validate_broker_name(name: str) -> str:
    """``name`` if it is 1..64 of ``[A-Za-z0-9_.-]`` (and not ``.``/``..``), else raise."""
    if _BROKER_NAME.fullmatch(name) is None or name in (".", ".."):
        raise InvalidBrokerName(f"broker name {name!r} must be 1-64 characters of [A-Za-z0-9_.-]")
    return name


class CorruptRoute(ClusterError):
    """A znode value that does not decode (written by something else, or a newer version)."""

    code = "corrupt_route"


class _MemberJson(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True):
    broker_name: str
    member_id: int
    http: str
    store: str
    started_ms: int
    kafka: str | None = None
    remoting: str | None = None
    ha: str | None = None
    last_epoch: int | None = None
    max_offset: int | None = None
    tls_identity: str | None = None


class _PlacementJson(msgspec.Struct, forbid_unknown_fields=False):
    queues: list[str]


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One broker process, as it registers itself.

    ``member_id`` is allocated once per store directory and kept in it; it is also the Kafka
    node id and RocketMQ's ``brokerId`` of the HA handshake. Addresses are the advertised
    ones: ``http`` a base URL, ``kafka``/``ha``/``store`` ``host:port``."""

    broker_name: str
    member_id: int
    http: str
    store: str
    started_ms: int
    kafka: str | None = None
    #: The RocketMQ remoting port's ``host:port`` (``--remoting-port``), for route bodies.
    remoting: str | None = None
    ha: str | None = None
    #: A replica's last epoch and CommitLog max offset, published when an election is due.
    last_epoch: int | None = None
    max_offset: int | None = None
    #: The common name of the member's replication certificate (mutual TLS on the HA port):
    #: the only identity a master lets replicate as this member id.
    tls_identity: str | None = None

    def to_json(self) -> bytes:
        return msgspec.json.encode(
            _MemberJson(
                broker_name=self.broker_name,
                member_id=self.member_id,
                http=self.http,
                store=self.store,
                started_ms=self.started_ms,
                kafka=self.kafka,
                remoting=self.remoting,
                ha=self.ha,
                last_epoch=self.last_epoch,
                max_offset=self.max_offset,
                tls_identity=self.tls_identity,
            )
        )

    @staticmethod
    def from_json(raw: bytes) -> MemberInfo:
        try:
            value = msgspec.json.decode(raw, type=_MemberJson)
        except msgspec.DecodeError as exc:
            raise CorruptRoute(f"member record {raw[:200]!r}: {exc}") from None
        return MemberInfo(
            broker_name=value.broker_name,
            member_id=value.member_id,
            http=value.http,
            store=value.store,
            started_ms=value.started_ms,
            kafka=value.kafka,
            remoting=value.remoting,
            ha=value.ha,
            last_epoch=value.last_epoch,
            max_offset=value.max_offset,
            tls_identity=value.tls_identity,
        )

    @property
    def kafka_host_port(self) -> tuple[str, int] | None:
        if self.kafka is None:
            return None
        host, _, port = self.kafka.rpartition(":")
        return host, int(port)


@dataclass(frozen=True, slots=True)
class BrokerGroup:
    """A broker name: the members alive now and which one serves its queues.

    Without replication a group has at most one member and it is the master. ``last_known``
    is the most recent registration, kept after the broker dies so its addresses stay known."""

    name: str
    members: tuple[MemberInfo, ...] = ()
    master_id: int | None = None
    epoch: int = 0
    last_known: MemberInfo | None = None
    #: The replica group's state (``None`` for a broker that takes no replicas).
    state: GroupState | None = None

    @property
    def master(self) -> MemberInfo | None:
        for member in self.members:
            if member.member_id == self.master_id:
                return member
        return None

    @property
    def alive(self) -> bool:
        """Whether the group can take writes: it has a live master."""
        return self.master is not None

    @property
    def addresses(self) -> MemberInfo | None:
        """The member whose addresses routes show: the master, else the last registration."""
        return self.master or (self.members[0] if self.members else self.last_known)


@dataclass(frozen=True, slots=True)
class TopicPlacement:
    """Which broker name owns each queue id of a topic (index = queue id).

    ``version`` is the znode version it was read at: a change is written only against it, so
    two brokers can never both claim a queue."""

    topic: str
    owners: tuple[str, ...]
    version: int = -1

    @property
    def queue_count(self) -> int:
        return len(self.owners)

    def queues_of(self, broker_name: str) -> tuple[int, ...]:
        return tuple(q for q, owner in enumerate(self.owners) if owner == broker_name)

    def to_json(self) -> bytes:
        return msgspec.json.encode(_PlacementJson(queues=list(self.owners)))

    @staticmethod
    def from_json(topic: str, raw: bytes, version: int = -1) -> TopicPlacement:
        try:
            value = msgspec.json.decode(raw, type=_PlacementJson)
        except msgspec.DecodeError as exc:
            raise CorruptRoute(f"route of topic {topic!r}: {exc}") from None
        if not value.queues:
            raise CorruptRoute(f"route of topic {topic!r} has no queues")
        return TopicPlacement(topic=topic, owners=tuple(value.queues), version=version)


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """Where one queue lives, for ``GET /topics/{t}/route`` and the route-aware clients."""

    queue_id: int
    broker_name: str
    alive: bool
    http: str | None
    kafka: str | None
    member_id: int | None


@dataclass(frozen=True)
class ClusterView:
    """One consistent snapshot of the cluster, as this broker last heard it from ZooKeeper."""

    groups: Mapping[str, BrokerGroup] = field(default_factory=dict)
    topics: Mapping[str, TopicPlacement] = field(default_factory=dict)

    def placement(self, topic: str) -> TopicPlacement | None:
        return self.topics.get(topic)

    def owner(self, topic: str, queue_id: int) -> str | None:
        placement = self.topics.get(topic)
        if placement is None or not 0 <= queue_id < placement.queue_count:
            return None
        return placement.owners[queue_id]

    def group(self, broker_name: str) -> BrokerGroup:
        return self.groups.get(broker_name) or BrokerGroup(broker_name)

    def master_of(self, broker_name: str) -> MemberInfo | None:
        return self.group(broker_name).master

    def live_brokers(self) -> tuple[str, ...]:
        """Names of the groups with a live master, sorted."""
        return tuple(sorted(name for name, group in self.groups.items() if group.alive))

    def live_members(self) -> tuple[MemberInfo, ...]:
        """Every live member of every group, ordered by member id."""
        members = (member for group in self.groups.values() for member in group.members)
        return tuple(sorted(members, key=lambda m: m.member_id))

    def member(self, member_id: int) -> MemberInfo | None:
        for group in self.groups.values():
            for member in group.members:
                if member.member_id == member_id:
                    return member
        return None

    def route(self, topic: str) -> list[QueueRoute] | None:
        placement = self.topics.get(topic)
        if placement is None:
            return None
        return [self._queue_route(q, owner) for q, owner in enumerate(placement.owners)]

    def _queue_route(self, queue_id: int, owner: str) -> QueueRoute:
        group = self.group(owner)
        shown = group.addresses
        return QueueRoute(
            queue_id=queue_id,
            broker_name=owner,
            alive=group.alive,
            http=shown.http if shown else None,
            kafka=shown.kafka if shown else None,
            member_id=shown.member_id if shown else None,
        )

    def queue_counts(self) -> dict[str, int]:
        """Broker name -> number of queues it owns, over every topic (every known broker)."""
        counts = dict.fromkeys(self.groups, 0)
        for placement in self.topics.values():
            for owner in placement.owners:
                counts[owner] = counts.get(owner, 0) + 1
        return counts

    def describe(self) -> dict[str, Any]:
        """The ``GET /cluster`` body's brokers part."""
        counts = self.queue_counts()
        brokers = []
        for name in sorted(counts):
            group = self.group(name)
            shown = group.addresses
            brokers.append(
                {
                    "name": name,
                    "alive": group.alive,
                    "http": shown.http if shown else None,
                    "kafka": shown.kafka if shown else None,
                    "member_id": shown.member_id if shown else None,
                    "queues": counts[name],
                }
            )
        return {"brokers": brokers, "topics": len(self.topics)}
