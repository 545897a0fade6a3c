"""Topic metadata, persisted as ``config/topics.json`` (RocketMQ ``TopicConfigManager``)::

    {"topicConfigTable": {"orders": {"topicName": "orders", "queues": 8, "readQueueNums": 8,
                                     "writeQueueNums": 8, "perm": 6, "order": false}},
     "dataVersion": {"counter": 2, "timestamp": ...}}

``queues`` is the queue count the store uses; ``readQueueNums``/``writeQueueNums`` mirror it
(RocketMQ keeps them apart for scaling in/out, which this store does not do). ``perm`` is
RocketMQ's bit set: 4 = read, 2 = write, 1 = inherit. Topics grow, never shrink.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from store.config import StoreConfig
from store.errors import CorruptStore, InvalidArgument
from store.io.clock import Clock, wall_clock_ms
from store.metadata.offset_table import JsonTable
from store.names import is_system_topic, validate_topic

TOPICS_FILE = "topics.json"
PERM_INHERIT = 0x1
PERM_WRITE = 0x2
PERM_READ = 0x4
MAX_QUEUES_PER_TOPIC = 1024


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    queues: int
    perm: int = PERM_READ | PERM_WRITE
    order: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "topicName": self.name,
            "queues": self.queues,
            "readQueueNums": self.queues,
            "writeQueueNums": self.queues,
            "perm": self.perm,
            "order": self.order,
        }

    @staticmethod
    def from_json(name: str, fields: object) -> TopicConfig:
        if not isinstance(fields, dict):
            raise CorruptStore(f"topics.json: entry {name!r} is not an object")
        queues = fields.get("queues")
        if queues is None:  # a RocketMQ file: no "queues", take the larger of read/write
            queues = max(int(fields.get("readQueueNums", 0)), int(fields.get("writeQueueNums", 0)))
        if int(queues) < 1:
            raise CorruptStore(f"topics.json: topic {name!r} has {queues} queues")
        return TopicConfig(
            name=name,
            queues=int(queues),
            perm=int(fields.get("perm", PERM_READ | PERM_WRITE)),
            order=bool(fields.get("order", False)),
        )


class TopicConfigTable(JsonTable):
    """Topic name -> :class:`TopicConfig`, thread-safe, persisted atomically when dirty."""

    def __init__(self, path: Path, clock_ms: Clock = wall_clock_ms) -> None:
        self._topics: dict[str, TopicConfig] = {}
        super().__init__(path, clock_ms)

    @staticmethod
    def from_config(config: StoreConfig) -> TopicConfigTable:
        return TopicConfigTable(config.config_dir / TOPICS_FILE)

    def _load(self, document: dict[str, Any]) -> None:
        table = document.get("topicConfigTable", {})
        if not isinstance(table, dict):
            raise CorruptStore(f"{self.path}: topicConfigTable is not an object")
        self._topics = {name: TopicConfig.from_json(name, fields) for name, fields in table.items()}

    def _snapshot(self) -> dict[str, Any]:
        return {"topicConfigTable": {name: tc.to_json() for name, tc in sorted(self._topics.items())}}

    def create_or_grow(self, topic: str, queues: int, *, allow_system: bool = False) -> TopicConfig:
        """Create ``topic`` with ``queues`` queues, or grow it to that many; never shrinks.

        Raises :class:`~store.errors.InvalidTopicName` or :class:`InvalidArgument`.
        """
        validate_topic(topic, allow_system=allow_system)
        if not 1 <= queues <= MAX_QUEUES_PER_TOPIC:
            raise InvalidArgument(f"queue count must be in [1, {MAX_QUEUES_PER_TOPIC}], got {queues}")
        with self._lock:
            current = self._topics.get(topic)
            if current is not None and current.queues >= queues:
                return current
            grown = TopicConfig(topic, queues) if current is None else replace(current, queues=queues)
            self._topics[topic] = grown
            self._changed()
            return grown

    def get(self, topic: str) -> TopicConfig | None:
        with self._lock:
            return self._topics.get(topic)

    def __contains__(self, topic: object) -> bool:
        with self._lock:
            return topic in self._topics

    def delete(self, topic: str) -> bool:
        with self._lock:
            if self._topics.pop(topic, None) is None:
                return False
            self._changed()
            return True

    def topics(self, include_system: bool = False) -> dict[str, int]:
        """Topic -> queue count (system topics only when ``include_system``)."""
        with self._lock:
            return {
                name: tc.queues
                for name, tc in sorted(self._topics.items())
                if include_system or not is_system_topic(name)
            }
