"""The gateway's handle on the cluster it runs in (``sparkmq serve --cluster ... --kafka-port``).

``GatewayContext.cluster`` is a :class:`ClusterLink` in cluster mode and ``None`` on a lone
broker, where every handler behaves as before. It bundles what the broker already has — the
:class:`cluster.ClusterNode` (routes, read lock-free), the pooled HTTP client to the other
brokers (``Broker.peers``) and the local topic sync — behind small protocols, so the Kafka
package does not import the HTTP door. Questions about the routes are answered by
:mod:`ingest_api.kafka.topology`; this module adds "is it mine" and the calls to other brokers.

Calls to other brokers go over their HTTP API (``x-sparkmq-forwarded`` set, so they are served
where they land): the existing ``/groups/{g}/offsets`` routes for committed offsets, and the
gateway's own ``/kafka/peer/...`` routes for transactions (``ingest_api/http/routers/kafka_peers.py``).
A broker that is down or does not answer raises :class:`cluster.QueueUnavailable`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import msgspec

from cluster import ClusterNode, ClusterView, QueueUnavailable, TopicPlacement
from ingest_api.kafka.names import to_store
from ingest_api.kafka.peer_messages import ANSWERS, peer_path
from ingest_api.kafka.topology import CoordinatorChoice, CoordinatorKind, KafkaNode, coordinator, leader


class PeerPort(Protocol):
    """``broker.peers.PeerClient``: one request to a broker's live master."""

    async def request(
        self,
        member: Any,
        broker: str,
        method: str,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        content: bytes | None = None,
    ) -> httpx.Response: ...


class LocalTopicsPort(Protocol):
    """``cluster.local_sync.LocalTopicSync``: the local store has a routed topic's queues."""

    def ensure_local(self, topic: str, queues: int) -> None: ...


class PeerRefused(QueueUnavailable):
    """A broker answered a peer call with an error status: ``status`` and the ``error`` code
    of its ``{"error", "message"}`` body."""

    def __init__(self, message: str, *, broker: str, status: int, error: str) -> None:
        super().__init__(message, broker=broker)
        self.status = status
        self.error = error


_JSON = msgspec.json.Encoder()


@dataclass
class ClusterLink:
    node: ClusterNode
    peers: PeerPort
    local_topics: LocalTopicsPort

    @property
    def me(self) -> str:
        return self.node.name

    @property
    def view(self) -> ClusterView:
        return self.node.view

    def placement(self, topic: str) -> TopicPlacement | None:
        """The placement of Kafka topic ``topic`` (system topics never have one for Kafka)."""
        return self.view.placement(to_store(topic))

    def owner(self, topic: str, partition: int) -> str | None:
        return self.view.owner(to_store(topic), partition)

    def owns(self, topic: str, partition: int) -> bool:
        """Whether this broker leads the partition: it owns the queue and, in a replica group,
        is the group's master (a slave answers NOT_LEADER_OR_FOLLOWER)."""
        return self.owner(topic, partition) == self.me and self.node.serving

    def leader(self, topic: str, partition: int) -> KafkaNode | None:
        return leader(self.view, topic, partition)

    def coordinator(self, key: str, kind: CoordinatorKind) -> CoordinatorChoice:
        return coordinator(self.view, key, kind)

    def coordinates(self, key: str, kind: CoordinatorKind) -> bool:
        """Whether this broker is the live coordinator of ``key``."""
        return self.coordinator(key, kind).broker_name == self.me and self.node.serving

    def coordinates_elsewhere_in_group(self, key: str, kind: CoordinatorKind) -> bool:
        """This broker name coordinates ``key``, but this member is not its group's master (a
        slave, or a master whose group has elected another): only the master may answer."""
        return self.coordinator(key, kind).broker_name == self.me and not self.node.serving

    def ensure_local(self, topic: str, queues: int) -> None:
        """Blocking: the local store has Kafka topic ``topic`` with ``queues`` queues (a request
        may arrive before the route watch created it here)."""
        self.local_topics.ensure_local(to_store(topic), queues)

    async def call(
        self,
        broker: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        ok: tuple[int, ...] = (200, 201),
    ) -> Any:
        """One JSON call to broker ``broker``; its decoded answer. Raises :class:`PeerRefused`
        for a status outside ``ok`` and :class:`QueueUnavailable` when it is down."""
        content = None if body is None else _JSON.encode(body)
        headers = {"content-type": "application/json"} if content is not None else None
        answer = await self.peers.request(
            self.view.master_of(broker), broker, method, path, headers=headers, params=params, content=content
        )
        if answer.status_code not in ok:
            raise PeerRefused(
                f"broker {broker} answered {method} {path} with {answer.status_code}: {answer.text[:300]}",
                broker=broker,
                status=answer.status_code,
                error=_error_code(answer.content),
            )
        return msgspec.json.decode(answer.content) if answer.content else None

    async def peer(self, broker: str, op: str, message: msgspec.Struct) -> Any:
        """One ``/kafka/peer/{op}`` call (:mod:`ingest_api.kafka.peer_messages`); its answer."""
        raw = await self.call(broker, "POST", peer_path(op), body=message)
        answer_type = ANSWERS[op]
        return None if answer_type is None else msgspec.convert(raw, answer_type)


def _error_code(content: bytes) -> str:
    try:
        body = msgspec.json.decode(content)
    except msgspec.DecodeError:
        return ""
    return str(body.get("error", "")) if isinstance(body, dict) else ""
