"""The slice of ``store.MessageStore`` the gateway uses (a Protocol, so the seam is explicit).

See docs/store_api.md. Every method blocks (disk I/O, locks): the gateway calls them only
through :meth:`ingest_api.kafka.context.GatewayContext.run_blocking`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from store import (
    BatchReadResult,
    Boundary,
    Message,
    MessageView,
    ProduceColumns,
    ProduceOutcome,
    ProducerRef,
    PutResult,
)


class KafkaStore(Protocol):
    @property
    def config(self) -> Any: ...

    def topics(self) -> dict[str, int]: ...
    def has_topic(self, topic: str) -> bool: ...
    def queue_count(self, topic: str) -> int: ...
    def create_topic(self, topic: str, queues: int | None = None) -> int: ...
    def delete_topic(self, topic: str) -> bool: ...

    def put_messages(
        self, messages: Sequence[Message], *, producer: ProducerRef | None = None
    ) -> list[PutResult]: ...
    def put_columns(
        self, topic: str, columns: ProduceColumns, *, producer: ProducerRef | None = None
    ) -> ProduceOutcome: ...
    def now_ms(self) -> int: ...

    def read_batch(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        *,
        tag_expression: str | None = "*",
        end_offset: int | None = None,
    ) -> BatchReadResult: ...

    def get_by_uniq_key(self, topic: str, uniq_key: str) -> MessageView | None: ...
    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def max_offset(self, topic: str, queue_id: int) -> int: ...
    def offset_for_timestamp(
        self, topic: str, queue_id: int, timestamp_ms: int, boundary: Boundary = Boundary.LOWER
    ) -> int: ...
    def add_arrival_listener(self, listener: Callable[[str, int, int], None]) -> None: ...
    def remove_arrival_listener(self, listener: Callable[[str, int, int], None]) -> None: ...

    def commit_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> None: ...
    def committed_offsets(self, group: str, topic: str) -> dict[int, int]: ...
    def groups(self) -> dict[str, list[str]]: ...
