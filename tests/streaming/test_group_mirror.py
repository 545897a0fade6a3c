"""The group-offset mirror's delivery rules (no Spark: the mirror runs on the driver)."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from streaming.options import parse_options
from streaming.reader import GroupMirror
from tests.streaming.conftest import Broker, open_store, produce


def test_path_mode_mirror_retries_while_the_store_is_owned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store_dir = tmp_path / "store"
    progress = {"orders/0": 2, "orders/1": 1}
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
        mirror = GroupMirror(parse_options({"path": str(store_dir), "topic": "orders", "group": "billing"}))
        with caplog.at_level(logging.WARNING, logger="streaming.reader"):
            mirror.publish(progress)  # the directory is locked by its owner: warn, keep going
        assert "could not mirror offsets of group billing" in caplog.text
        assert mirror.last is None
        assert store.committed_offsets("billing", "orders") == {}
    mirror.publish(progress)  # nobody owns it now: a short open commits
    assert mirror.last == progress
    with open_store(store_dir) as store:
        assert store.committed_offsets("billing", "orders") == {0: 2, 1: 1}
        assert store.lag("billing", "orders") == {0: 0, 1: 1}


def test_mirror_without_group_does_nothing(tmp_path: Path) -> None:
    mirror = GroupMirror(parse_options({"path": str(tmp_path), "topic": "orders"}))
    mirror.publish({"orders/0": 5})
    assert mirror.last is None


def test_path_data_with_endpoint_mirror_goes_through_the_running_broker(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    with open_store(store_dir) as store:
        produce(store, "orders", 4, queues=2)
    broker = Broker(store_dir)  # the owner of the directory from now on
    try:
        options = parse_options(
            {"path": str(store_dir), "endpoint": broker.url, "topic": "orders", "group": "billing"}
        )
        assert options.data_mode == "path"
        mirror = GroupMirror(options)
        mirror.publish({"orders/0": 1, "orders/1": 2})
        assert mirror.last == {"orders/0": 1, "orders/1": 2}
        lag = httpx.get(f"{broker.url}/groups/billing/lag", params={"topic": "orders"}).json()
        assert {q["queue_id"]: q["committed_offset"] for q in lag["queues"]} == {0: 1, 1: 2}
        assert lag["total_lag"] == 1
    finally:
        broker.stop()
