"""Keeping this broker's store in step with the cluster's routes.

A topic of N queue ids is created locally with N queues on every broker that owns at least one
of them (the ConsumeQueues of queues owned elsewhere stay empty and are never written: the doors
route around them). At join, topics found in the store but unknown to the cluster are adopted
with every queue here (their data is here); a queue holding messages that the routes give to
another broker is reported through :meth:`ClusterNode.warn` (``/healthz``), never only logged.
A topic whose route is deleted while this broker runs is deleted here too.
"""

from __future__ import annotations

import logging
import threading

from cluster.model import ClusterView
from cluster.node import ClusterNode
from store import MessageStore, is_system_topic

log = logging.getLogger("sparkmq.cluster")


class LocalTopicSync:
    """Grows local topics to their routed queue count; adopts and reports at join."""

    def __init__(self, store: MessageStore, node: ClusterNode) -> None:
        self._store = store
        self._node = node
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def start(self) -> None:
        """Adopt and check the store's topics (blocking), then follow every route change."""
        view = self._node.view
        for topic, queues in sorted(self._store.topics().items()):
            if is_system_topic(topic):
                continue
            placement = view.placement(topic)
            if placement is None:
                if self._node.adopt_topic(topic, queues):
                    log.info("adopted topic %s (%d queues) into the cluster", topic, queues)
                continue
            self._check_foreign_data(topic, placement.owners)
        self._node.add_view_listener(self.apply)

    def _check_foreign_data(self, topic: str, owners: tuple[str, ...]) -> None:
        for queue_id, (low, high) in sorted(self._store.queue_offsets(topic).items()):
            owner = owners[queue_id] if queue_id < len(owners) else None
            if high > low and owner != self._node.name:
                self._node.warn(
                    f"queue {topic}/{queue_id} holds {high - low} messages here, but the cluster routes "
                    f"it to {owner or 'no broker'}: they are not served"
                )

    def apply(self, view: ClusterView) -> None:
        """Create or grow the local topics this broker owns queues of (idempotent)."""
        with self._lock:
            current = set()
            for topic, placement in view.topics.items():
                if self._node.name not in placement.owners:
                    continue
                current.add(topic)
                self.ensure_local(topic, placement.queue_count)
            for gone in self._seen - set(view.topics):
                if self._store.has_topic(gone):
                    self._store.delete_topic(gone)
                    log.info("topic %s deleted from the cluster: deleted here", gone)
            self._seen = current

    def ensure_local(self, topic: str, queues: int) -> None:
        """The local topic exists with at least ``queues`` queues (a write path calls this too,
        in case it runs before the route watch has been applied)."""
        if not self._store.has_topic(topic) or self._store.queue_count(topic) < queues:
            self._store.create_topic(topic, queues)
