"""The remoting door over a real store, on an event loop of its own (shared by the door tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ingest_api.remoting.door import RemotingDoor, start_remoting_door
from ingest_api.remoting.handlers import DoorContext
from store import MessageStore
from tests.support.stores import light_config


@dataclass
class Door:
    store: MessageStore
    door: RemotingDoor

    @property
    def ctx(self) -> DoorContext:
        return self.door.context

    @property
    def name_srv(self) -> str:
        return f"127.0.0.1:{self.door.port}"


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    """A remoting door on a free port (port 0: it advertises the port it bound) over a store,
    on an event loop of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="remoting-door-test", daemon=True)
    thread.start()
    store = MessageStore.open(light_config(tmp_path / "store"))
    try:
        running = asyncio.run_coroutine_threadsafe(start_remoting_door(store, port=0), loop).result(10)
        try:
            yield Door(store, running)
        finally:
            asyncio.run_coroutine_threadsafe(running.close(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        store.close()
