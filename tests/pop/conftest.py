"""A store with a manual clock and a POP service over it (no background thread)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.pop import PopConfig, PopService
from store import Message, MessageStore
from tests.support.stores import ManualClock, tiny_config


@dataclass
class Pop:
    dir: Path
    clock: ManualClock
    store: MessageStore
    service: PopService

    def put(self, topic: str, *bodies: bytes, queue_id: int | None = None, **props: str) -> None:
        self.store.put_messages(
            [Message(topic=topic, body=b, queue_id=queue_id, properties=dict(props)) for b in bodies]
        )

    def reopen(self, crash: bool = False) -> None:
        """Close (or abandon, as a kill -9 would) and open store and service again."""
        self.service.close()
        if crash:
            self.store.abandon()
        else:
            self.store.close()
        self.store = MessageStore.open(tiny_config(self.dir), clock_ms=self.clock)
        self.service = PopService(self.store, self.service.config)


@pytest.fixture
def pop(tmp_path: Path) -> Iterator[Pop]:
    clock = ManualClock()
    store = MessageStore.open(tiny_config(tmp_path), clock_ms=clock)
    store.create_topic("t", 2)
    service = PopService(store, PopConfig(background=False))
    p = Pop(tmp_path, clock, store, service)
    yield p
    p.service.close()
    p.store.close()
