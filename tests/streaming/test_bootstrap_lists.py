"""The sink's and the operator job's HTTP clients take a bootstrap list and skip an address that
does not answer (a real broker on 127.0.0.1; the dead address is a closed port)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.config import ServerConfig
from streaming.operators.client import BrokerClient
from streaming.operators.runtime import parse_args
from streaming.sink_client import SinkClient
from streaming.sink_columns import parse_sink_options
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.network import free_port
from tests.support.stores import light_config


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    running = start_broker(ServerConfig(store=light_config(tmp_path_factory.mktemp("lone"))))
    yield running
    running.stop()


def test_the_sink_client_goes_past_a_dead_first_address(broker: RunningBroker) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    options = parse_sink_options({"endpoint": f"{dead},{broker.url}", "topic": "t"})
    assert options.endpoint == f"{dead},{broker.url}"
    client = SinkClient.for_options(options)
    assert client.abort("s1", 0, []) == {"removed": 0}
    assert client.known.candidates()[0] == broker.url, "the one that answered is asked first"


def test_the_operator_jobs_client_goes_past_a_dead_first_address(
    broker: RunningBroker, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    config = parse_args(["--endpoint", f"{dead}/, {broker.url}", "--checkpoint-dir", str(tmp_path)])
    assert config.endpoint == f"{dead},{broker.url}"
    client = BrokerClient(config.endpoint, timeout_s=10)
    assert client.leads(), "a lone broker leads"
    assert client.settings()["delay_levels_ms"], "the broker's settings, from the live address"
    with pytest.raises(SystemExit):
        parse_args(["--endpoint", "ftp://x", "--checkpoint-dir", str(tmp_path)])
