"""Fixtures for store tests: small files so rolling, retention and recovery happen quickly."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from store import MessageStore
from tests.support.stores import ManualClock, tiny_config


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def open_store(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[..., MessageStore]]:
    """``open_store(**config_changes)`` opens (and at teardown closes) a small store."""
    opened: list[MessageStore] = []

    def _open(**changes: object) -> MessageStore:
        store = MessageStore.open(tiny_config(tmp_path / "store", **changes), clock_ms=clock)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()
