"""The remoting door as a companion of a real running broker (``broker.lifecycle.running_broker``
over a real store, no HTTP door), on an event loop of its own (shared by the door tests)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.config import ServerConfig
from broker.lifecycle import running_broker
from broker.state import Broker
from ingest_api.remoting.companion import RemotingCompanion
from ingest_api.remoting.door import RemotingDoor
from ingest_api.remoting.handlers import DoorContext
from store import MessageStore
from tests.support.stores import light_config


@dataclass
class Door:
    broker: Broker
    door: RemotingDoor
    loop: asyncio.AbstractEventLoop

    @property
    def store(self) -> MessageStore:
        return self.broker.store

    @property
    def ctx(self) -> DoorContext:
        return self.door.context

    @property
    def name_srv(self) -> str:
        return f"127.0.0.1:{self.door.port}"


@contextlib.contextmanager
def serve_door(config: ServerConfig, companion: RemotingCompanion) -> Iterator[Door]:
    """``running_broker(config)`` with ``companion`` on an event loop of its own; stopped (door
    first, then the store) at the end. The broker's start-up failure is raised here."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="remoting-door-test", daemon=True)
    thread.start()
    started: asyncio.Future[Broker] = loop.create_future()
    stop = asyncio.Event()

    async def run() -> None:
        try:
            async with running_broker(config, companions=[companion]) as broker:
                started.set_result(broker)
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    task = asyncio.run_coroutine_threadsafe(run(), loop)
    try:
        waited = asyncio.wait_for(asyncio.shield(started), 30)
        broker = asyncio.run_coroutine_threadsafe(waited, loop).result(35)
        assert companion.door is not None
        yield Door(broker, companion.door, loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        with contextlib.suppress(Exception):  # a start-up failure: already raised from ``started``
            task.result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def running_door(tmp_path: Path, **config: Any) -> Iterator[Door]:
    """A running broker with its remoting door on a free port (port 0: it advertises the port it
    bound). ``config``: more :class:`ServerConfig` fields (``auth_file``)."""
    server_config = ServerConfig(store=light_config(tmp_path / "store"), log_level="warning", **config)
    with serve_door(server_config.validate(), RemotingCompanion(port=0)) as door:
        yield door


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    """A running broker with its remoting door (:func:`running_door`), no auth."""
    with running_door(tmp_path) as running:
        yield running
