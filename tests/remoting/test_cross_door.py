"""The remoting door as a companion of the real HTTP broker (the ``sparkmq serve --remoting-port``
path): what ali-ons sends is read over HTTP, what HTTP stores ali-ons consumes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from broker.config import ServerConfig
from ingest_api.remoting.companion import RemotingCompanion, serve_companions
from ingest_api.server import BrokerServer, build_server
from sparkmq.cli.serve import ServeOptions
from tests.support.ons import run_producer, start_consumer
from tests.support.stores import light_config
from tests.support.waiting import wait_until


@dataclass
class Broker:
    server: BrokerServer
    http: httpx.Client
    remoting: RemotingCompanion

    @property
    def name_srv(self) -> str:
        assert self.remoting.door is not None
        return f"127.0.0.1:{self.remoting.door.port}"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    remoting = RemotingCompanion(port=0)
    config = ServerConfig(store=light_config(tmp_path / "store"), port=port, log_level="warning")
    server = build_server(config.validate(), companions=[remoting])
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), 30, "the HTTP broker to start")
    assert server.started and remoting.door is not None
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        yield Broker(server, http, remoting)
    server.should_exit = True
    thread.join(30)
    sock.close()
    assert remoting.door is None  # the companion closed the door before the store


def test_ali_ons_sends_are_read_over_http(broker: Broker) -> None:
    sent = run_producer(
        broker.name_srv,
        "door-r",
        [{"body": "from-ons", "tags": "T1", "keys": ["order-1"], "properties": {"p": "v"}}],
    )
    (result,) = sent
    pulled = broker.http.get(
        f"/topics/door-r/queues/{result['queueId']}/messages", params={"offset": 0}
    ).json()
    (message,) = pulled["messages"]
    assert (message["body"], message["keys"], message["tags"]) == ("from-ons", ["order-1"], "T1")
    assert message["properties"]["p"] == "v"


def test_http_sends_are_consumed_by_ali_ons(broker: Broker) -> None:
    for i in range(3):
        response = broker.http.post("/topics/door-h/messages", json={"body": f"h-{i}", "tags": "T"})
        assert response.status_code == 201, response.text
    consumer = start_consumer(broker.name_srv, "G_HTTP", "door-h", instanceName="c1", expect=3)
    try:
        received = consumer.wait_done(60.0)
    finally:
        consumer.stop()
    assert sorted(r["body"] for r in received) == ["h-0", "h-1", "h-2"]
    assert {r["tags"] for r in received} == {"T"}


def test_serve_flags_make_the_companion() -> None:
    config = ServerConfig(store=light_config(Path("unused")), host="0.0.0.0")
    assert serve_companions(ServeOptions(config=config, extra={})) == []
    (companion,) = serve_companions(
        ServeOptions(config=config, extra={"remoting_port": 10911, "advertise_host": "broker.lan"})
    )
    assert isinstance(companion, RemotingCompanion)
    assert (companion.host, companion.port, companion.advertised_host) == ("0.0.0.0", 10911, "broker.lan")
