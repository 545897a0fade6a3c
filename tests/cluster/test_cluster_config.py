"""``ClusterConfig`` refuses what cannot work, naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster import parse_cluster_address
from cluster.config import ClusterConfig
from sparkmq.cli import app
from store import InvalidArgument


def _config(**changes: object) -> ClusterConfig:
    base = ClusterConfig(parse_cluster_address("zk://127.0.0.1:2181"), "b1", "127.0.0.1", 8081)
    return base.with_changes(**changes)


def test_ha_advertise_replaces_the_published_replication_address() -> None:
    assert _config(ha_port=10912).ha_address == "127.0.0.1:10912"
    assert _config(ha_port=10912, ha_advertise="proxy.local:20912").ha_address == "proxy.local:20912"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ha_port": 10912, "ha_advertise": "nohost"}, "is not HOST:PORT"),
        ({"ha_port": 10912, "ha_advertise": "h:0"}, "is not HOST:PORT"),
        ({"ha_port": 10912, "ha_advertise": ":10912"}, "is not HOST:PORT"),
        ({"ha_advertise": "h:10912"}, "needs --ha-port"),
    ],
)
def test_a_bad_ha_advertise_is_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        _config(**changes)


_MEMBER = ["--cluster", "zk://127.0.0.1:1/c", "--broker-name", "b1"]


def test_max_time_slave_not_catchup_is_a_replication_setting() -> None:
    assert _config().max_time_slave_not_catchup_ms == 15_000  # RocketMQ's haMaxTimeSlaveNotCatchup
    assert _config(ha_port=10912, max_time_slave_not_catchup_ms=5000).max_time_slave_not_catchup_ms == 5000
    with pytest.raises(InvalidArgument, match="max_time_slave_not_catchup_ms must be >= 1"):
        _config(ha_port=10912, max_time_slave_not_catchup_ms=0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ha-advertise", "h:10912"], "--ha-advertise needs --ha-port"),
        (
            [*_MEMBER, "--ha-port", "10912", "--ha-advertise", "h"],
            "is not HOST:PORT",
        ),
        (["--max-time-slave-not-catchup-ms", "5000"], "--max-time-slave-not-catchup-ms needs --ha-port"),
        (
            [*_MEMBER, "--ha-port", "10912", "--max-time-slave-not-catchup-ms", "0"],
            "max_time_slave_not_catchup_ms must be >= 1",
        ),
    ],
)
def test_serve_refuses_a_bad_replication_option_before_opening_anything(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    argv = ["serve", "--store-dir", str(tmp_path / "data"), "--operators", "off", *extra]
    result = CliRunner().invoke(app, argv, terminal_width=200)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "data").exists()
