"""A real broker (uvicorn on 127.0.0.1, a free port) on a temporary store, driven with httpx."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from broker.config import ServerConfig
from broker.lifecycle import Companion, StoreOpener
from ingest_api.server import BrokerServer, build_server
from store.message_store import MessageStore
from tests.support.stores import light_config

START_TIMEOUT_S = 30.0


@dataclass
class RunningBroker:
    """A broker served from a background thread; ``stop()`` is the clean shutdown path."""

    server: BrokerServer
    thread: threading.Thread
    port: int
    store_dir: Path
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, token: str | None = None, **kwargs: object) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30.0, **kwargs)  # type: ignore[arg-type]
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.server.should_exit = True
        self.thread.join(timeout=START_TIMEOUT_S)
        assert not self.thread.is_alive(), "broker did not stop"


def start_broker(
    config: ServerConfig,
    open_store: StoreOpener = MessageStore.open,
    companions: Sequence[Companion] = (),
    freeze_heap: bool = False,
    fixed_port: int = 0,
) -> RunningBroker:
    """Serve ``config`` from a thread on 127.0.0.1 (``fixed_port``, or a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", fixed_port))
    port = sock.getsockname()[1]
    server = build_server(
        config.with_changes(port=port, log_level="warning"),
        companions=companions,
        open_store=open_store,
        freeze_heap=freeze_heap,
    )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:
            failure.append(exc)
        finally:
            sock.close()

    thread = threading.Thread(target=run, name=f"broker-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not server.started:
        if failure or not thread.is_alive():
            raise RuntimeError(f"broker failed to start: {failure}")
        if time.monotonic() > deadline:
            raise TimeoutError("broker did not start in time")
        thread.join(timeout=0.01)
    return RunningBroker(server=server, thread=thread, port=port, store_dir=config.store.store_dir)


BrokerFactory = Callable[..., RunningBroker]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers with custom settings; all are stopped at teardown."""
    started: list[RunningBroker] = []

    def factory(
        store_dir: Path | None = None,
        store: dict[str, object] | None = None,
        open_store: StoreOpener = MessageStore.open,
        **server: object,
    ) -> RunningBroker:
        directory = store_dir or tmp_path / f"store-{len(started)}"
        config = ServerConfig(store=light_config(directory, **(store or {})), **server)  # type: ignore[arg-type]
        running = start_broker(config, open_store)
        started.append(running)
        return running

    yield factory
    for running in started:
        if running.thread.is_alive():
            running.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """One broker for the tests that only need fresh topic names."""
    directory = tmp_path_factory.mktemp("shared-store")
    running = start_broker(ServerConfig(store=light_config(directory)))
    yield running
    running.stop()


@pytest.fixture
def client(shared_broker: RunningBroker) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_broker.url, timeout=30.0) as http:
        yield http


_counter = iter(range(1_000_000))


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name unique to the test."""
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:80]
    return f"{base}_{next(_counter)}"
