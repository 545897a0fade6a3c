"""A real broker (uvicorn + the broker core) with its gRPC door as a companion, and helpers
that read what the official client wrote back over the HTTP door."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from broker.config import ServerConfig
from broker.state import Broker
from ingest_api.grpc.companion import GrpcCompanion
from tests.ingest.conftest import RunningBroker, start_broker
from tests.support.rocketmq5 import run_client
from tests.support.stores import light_config
from tests.support.waiting import wait_until


@dataclass
class DoorBroker:
    """A running broker, its gRPC door's endpoint and the core's objects (in this process)."""

    running: RunningBroker
    companion: GrpcCompanion
    home: Path

    @property
    def endpoint(self) -> str:
        assert self.companion.door is not None
        return f"127.0.0.1:{self.companion.door.port}"

    @property
    def broker(self) -> Broker:
        assert self.companion.broker is not None
        return self.companion.broker

    def http(self) -> httpx.Client:
        return self.running.client()

    def client(self, script: str, argument: dict[str, Any], timeout_s: float = 120) -> list[Any]:
        """Run an official-client script against this door (``endpoint`` filled in)."""
        return run_client(script, {"endpoint": self.endpoint, **argument}, self.home, timeout_s)

    def in_background(self, script: str, argument: dict[str, Any]) -> Callable[[], list[Any]]:
        """Start a client script on a thread; the returned function joins it for its lines."""
        return in_background(lambda: self.client(script, argument))


def in_background(call: Callable[[], list[Any]], timeout_s: float = 240) -> Callable[[], list[Any]]:
    """Run ``call`` on a thread; the returned function joins it and returns (or raises) its outcome."""
    out: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            out.extend(call())
        except BaseException as exc:  # re-raised in the joining thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def join() -> list[Any]:
        thread.join(timeout=timeout_s)
        if failure:
            raise failure[0]
        assert not thread.is_alive(), "the client did not finish"
        return out

    return join


def start_door_broker(
    store_dir: Path, home: Path, companion: GrpcCompanion | None = None, **store: Any
) -> DoorBroker:
    """A broker on ``store_dir`` (``store``: :func:`light_config` changes) with ``companion``
    (a door on a free port by default)."""
    companion = companion or GrpcCompanion(port=0)
    config = ServerConfig(store=light_config(store_dir, **store))
    running = start_broker(config, companions=[companion])
    return DoorBroker(running, companion, home)


def check_batch(rows: list[dict[str, Any]]) -> bytes:
    """The transaction resolver's decisions as the operator job posts them (Arrow IPC)."""
    table = pa.Table.from_pylist(rows)
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


class SettableClock:
    """Epoch ms that a test moves by hand (the client registry's clock)."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def answer_check_back(http: httpx.Client, producer_group: str, batch_id: int, sent: int) -> str:
    """Wait until ``producer_group`` has ``sent`` transactions of which one is still open, and
    post the resolver's CHECK decision for that one (what the transaction operator posts once a
    half is old enough); its id."""

    def listed(state: str) -> list[dict[str, Any]]:
        params = {"producer_group": producer_group, "state": state}
        return list(http.get("/transactions", params=params).json()["transactions"])

    wait_until(
        lambda: len(listed("all")) == sent and len(listed("prepared")) == 1,
        timeout_s=60,
        what=f"{sent} transactions of {producer_group}, one open",
    )
    (left,) = listed("prepared")
    txid = str(left["transaction_id"])
    halves = http.get(  # every half is in queue 0 of the broker's half topic
        "/topics/RMQ_SYS_TRANS_HALF_TOPIC/queues/0/messages", params={"offset": 0, "max_messages": 1000}
    ).json()["messages"]
    (half,) = [m for m in halves if m["uniq_key"] == txid]
    row = {
        "transaction_id": txid,
        "producer_group": producer_group,
        "topic": producer_group,
        "commitlog_offset": half["commitlog_offset"],
        "uniq_key": txid,
        "check_times": 1,
        "decided_ms": int(time.time() * 1000),
        "action": 0,  # CHECK: ask the producer
    }
    posted = http.post(
        f"/operators/transactions/batches/{batch_id}",
        content=check_batch([row]),
        headers={"content-type": "application/vnd.apache.arrow.stream"},
    )
    assert posted.status_code == 200, posted.text
    return txid
