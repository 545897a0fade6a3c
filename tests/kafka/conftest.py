"""Shared fixtures: a real ``MessageStore`` on a temp dir and a gateway on a free port."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# kafka-python 3.0 loads its JSON schemas with a deprecated importlib API at import (harmless).
warnings.filterwarnings("ignore", "(read|open)_text is deprecated", DeprecationWarning)

from ingest_api.kafka import GatewayConfig, GatewayThread  # noqa: E402
from store import MessageStore, StoreConfig  # noqa: E402

#: Short enough for fast tests, long enough for two clients to land in one generation.
TEST_REBALANCE_DELAY_MS = 100


def wait_until(predicate: Callable[[], object], timeout_s: float = 15.0, what: str = "condition") -> None:
    """Poll ``predicate`` until truthy; fail after ``timeout_s`` (no bare sleeps in tests)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def store_config(path: Path) -> StoreConfig:
    return StoreConfig(
        store_dir=path,
        default_queues_per_topic=3,
        commitlog_file_size_bytes=64 << 20,
        index_hash_slots=10_000,
        index_max_entries=40_000,
    ).validate()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(store_config(tmp_path / "store")) as opened:
        yield opened


def gateway_config() -> GatewayConfig:
    return GatewayConfig(
        port=0,
        initial_rebalance_delay_ms=TEST_REBALANCE_DELAY_MS,
        coordinator_tick_ms=20,
        min_session_timeout_ms=500,
    ).validate()


@pytest.fixture
def gateway(store: MessageStore) -> Iterator[GatewayThread]:
    with GatewayThread(store, gateway_config()) as running:
        yield running


@pytest.fixture
def bootstrap(gateway: GatewayThread) -> str:
    return gateway.bootstrap
