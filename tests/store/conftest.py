"""Fixtures for store tests: small files so rolling, retention and recovery happen quickly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store import MessageStore, StoreConfig


class ManualClock:
    """A settable millisecond clock (time is injected, never slept on)."""

    def __init__(self, start_ms: int = 1_763_700_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def small_config(store_dir: Path, **changes: object) -> StoreConfig:
    base = StoreConfig(
        store_dir=store_dir,
        commitlog_file_size_bytes=64 * 1024,
        consume_queue_units_per_file=64,
        index_hash_slots=97,
        index_max_entries=400,
        default_queues_per_topic=4,
        background_services=False,
    )
    return base.with_changes(**changes) if changes else base.validate()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def open_store(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(**config_changes)`` opens (and at teardown closes) a small store."""
    opened: list[MessageStore] = []

    def _open(**changes: object) -> MessageStore:
        store = MessageStore.open(small_config(tmp_path / "store", **changes), clock_ms=clock)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
