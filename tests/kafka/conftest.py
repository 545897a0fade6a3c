"""Shared fixtures: a real ``MessageStore`` on a temp dir and a gateway on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ingest_api.kafka import GatewayConfig, GatewayThread
from store import MessageStore, StoreConfig
from tests.support.stores import light_config

if TYPE_CHECKING:
    from tests.kafka.test_transactions_kill import Processes

#: Short enough for fast tests, long enough for two clients to land in one generation.
TEST_REBALANCE_DELAY_MS = 100


def store_config(path: Path) -> StoreConfig:
    """The gateway tests' store: light files, three queues per topic."""
    return light_config(path, default_queues_per_topic=3)


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


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    """The gateway (and, on demand, the loop) as child processes, SIGKILLed at the end."""
    from tests.kafka.test_transactions_kill import Processes

    running = Processes(tmp_path)
    running.start_gateway()
    try:
        yield running
    finally:
        running.stop()
