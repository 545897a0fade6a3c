"""Concurrency, restart with data intact, and clean shutdown of `sparkmq serve` by signal."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.network import free_port

from .conftest import BrokerFactory

PRODUCERS = 8
PER_PRODUCER = 40


def test_concurrent_producers_lose_and_duplicate_nothing(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    broker.client().put("/topics/busy", json={"queues": 3})

    def producer(worker: int) -> list[tuple[int, int]]:
        placed = []
        with httpx.Client(base_url=broker.url, timeout=30) as http:
            for i in range(PER_PRODUCER):
                if i % 4 == 3:
                    batch = [{"body": f"{worker}-{i}-{j}"} for j in range(5)]
                    response = http.post("/topics/busy/messages:batch", json={"messages": batch})
                    assert response.status_code == 201, response.text
                    placed += [(r["queue_id"], r["queue_offset"]) for r in response.json()["results"]]
                else:
                    response = http.post("/topics/busy/messages", json={"body": f"{worker}-{i}"})
                    assert response.status_code == 201, response.text
                    placed.append((response.json()["queue_id"], response.json()["queue_offset"]))
        return placed

    with ThreadPoolExecutor(PRODUCERS) as pool:
        placed = [pair for result in pool.map(producer, range(PRODUCERS)) for pair in result]
    expected_total = PRODUCERS * (PER_PRODUCER * 3 // 4 + PER_PRODUCER // 4 * 5)
    assert len(placed) == expected_total
    assert len(set(placed)) == expected_total, "duplicated queue offsets"
    described = broker.client().get("/topics/busy").json()["queue_offsets"]
    for queue in described:
        offsets = sorted(off for qid, off in placed if qid == queue["queue_id"])
        assert offsets == list(range(queue["max_offset"])), "gap or duplicate in a queue"


def test_restart_keeps_data(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    store_dir = tmp_path / "restart-store"
    first = broker_factory(store_dir=store_dir)
    client = first.client()
    client.put("/topics/keep", json={"queues": 2})
    results = client.post(
        "/topics/keep/messages:batch",
        json={"messages": [{"body": f"m{i}", "queue_id": i % 2} for i in range(6)]},
    ).json()["results"]
    client.put("/groups/keeper/offsets", json={"topic": "keep", "offsets": {"0": 2}})
    first.stop()
    assert not (store_dir / "abort").exists()

    second = broker_factory(store_dir=store_dir)
    client = second.client()
    assert client.get("/topics").json()["topics"] == [{"topic": "keep", "queues": 2, "queue_offsets": None}]
    bodies = [m["body"] for m in client.get("/topics/keep/queues/0/messages").json()["messages"]]
    assert bodies == ["m0", "m2", "m4"]
    assert client.get(f"/messages/{results[5]['msg_id']}").json()["body"] == "m5"
    assert client.get("/groups/keeper/offsets", params={"topic": "keep"}).json()["offsets"]["0"] == 2
    assert (
        client.post("/topics/keep/messages", json={"body": "after", "queue_id": 1}).json()["queue_offset"]
        == 3
    )


def _wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"sparkmq serve exited early: {process.stderr.read() if process.stderr else ''}"
            )
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    raise AssertionError("sparkmq serve did not become healthy")


@pytest.mark.slow
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_cleanly_on_signal(tmp_path: Path, stop_signal: signal.Signals) -> None:
    store_dir, port, kafka_port = tmp_path / "served", free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "sparkmq.cli",
        "serve",
        "--store-dir",
        str(store_dir),
        "--port",
        str(port),
        "--operators",
        "off",
    ]
    if stop_signal is signal.SIGTERM:  # with the Kafka gateway on the same event loop
        command += ["--kafka-port", str(kafka_port)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy()
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, process)
        assert (store_dir / "abort").exists()
        assert httpx.post(f"{url}/topics/sig/messages", json={"body": "x"}).status_code == 201
        if stop_signal is signal.SIGTERM:
            socket.create_connection(("127.0.0.1", kafka_port), timeout=5).close()
        process.send_signal(stop_signal)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert not (store_dir / "abort").exists()


@pytest.mark.slow
def test_second_broker_on_same_store_fails_to_start(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    store_dir = tmp_path / "locked"
    broker_factory(store_dir=store_dir)
    command = [
        sys.executable,
        "-m",
        "sparkmq.cli",
        "serve",
        "--store-dir",
        str(store_dir),
        "--port",
        str(free_port()),
        "--operators",
        "off",
    ]
    finished = subprocess.run(command, capture_output=True, timeout=60, check=False)
    assert finished.returncode == 1
    assert b"failed to start" in finished.stderr


def test_serve_freezes_the_heap_once_started(tmp_path: Path) -> None:
    """``sparkmq serve`` (one broker per process) moves what startup allocated out of the garbage
    collector's generations, so full collections do not walk it while serving."""
    import gc

    from broker.config import ServerConfig
    from tests.support.stores import light_config

    from .conftest import start_broker

    gc.unfreeze()
    broker = start_broker(ServerConfig(store=light_config(tmp_path / "store")), freeze_heap=True)
    try:
        deadline = time.monotonic() + 30  # frozen right after uvicorn marks the server started
        while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
            broker.thread.join(timeout=0.01)
        assert gc.get_freeze_count() > 0
        response = broker.client().post(
            "/topics/frozen/messages", content=b'{"body": "a"}', headers={"content-type": "application/json"}
        )
        assert response.status_code == 201
    finally:
        broker.stop()
        gc.unfreeze()  # the test process runs many brokers: give the objects back
