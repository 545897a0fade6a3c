"""Auth file parsing and authorisation; Prometheus rendering; the long-poll hub. No store."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from pathlib import Path

import pytest

from broker.auth import DoorAuth, Right, authenticate, authorize, authorize_global_admin
from broker.errors import BrokerError
from broker.longpoll import ArrivalHub
from broker.metrics import BrokerMetrics, StoreGauges, render
from broker.security import (
    InvalidUsersFile,
    ScramMechanism,
    User,
    UsersFile,
    UserTable,
    make_credential,
    write_users,
)
from store.errors import InvalidArgument

TABLE = {
    "tokens": [
        {"name": "writer", "token": "writer-token", "produce": ["orders", "logs-*"]},
        {"name": "ops", "token": "ops-token-1", "admin": ["*"], "consume": ["*"]},
    ]
}


def door_auth(tmp_path: Path, document: object = TABLE) -> DoorAuth:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(document))
    return DoorAuth(UsersFile(path), b"s" * 32)


class TestAuth:
    def test_rights_by_pattern(self, tmp_path: Path) -> None:
        table = door_auth(tmp_path)
        writer = authenticate(table, "Bearer writer-token")
        assert writer is not None
        assert writer.name == "writer"
        authorize(writer, Right.PRODUCE, "orders")
        authorize(writer, Right.PRODUCE, "logs-app")
        with pytest.raises(BrokerError) as info:
            authorize(writer, Right.CONSUME, "orders")
        assert info.value.status == 403
        with pytest.raises(BrokerError):
            authorize_global_admin(writer)
        authorize_global_admin(authenticate(table, "bearer ops-token-1"))

    @pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer ", "Bearer wrong-token"])
    def test_bad_credentials_are_401(self, tmp_path: Path, header: str | None) -> None:
        with pytest.raises(BrokerError) as info:
            authenticate(door_auth(tmp_path), header)
        assert info.value.status == 401
        assert info.value.headers == {"WWW-Authenticate": "Bearer"}

    def test_basic_password_is_checked_once_then_cached(self, tmp_path: Path) -> None:
        now = [0.0]
        path = tmp_path / "users.json"
        scram = {ScramMechanism.SHA_256: make_credential(ScramMechanism.SHA_256, "pencil")}
        write_users(path, UserTable((User("alice", scram=scram, consume=("orders",)),)))
        auth = DoorAuth(UsersFile(path), b"s" * 32, clock=lambda: now[0])
        good = "Basic " + base64.b64encode(b"alice:pencil").decode()
        principal = authenticate(auth, good)
        assert principal is not None and principal.name == "alice"
        authorize(principal, Right.CONSUME, "orders")
        for wrong in (b"alice:pencils", b"bob:pencil", b"alice:"):
            with pytest.raises(BrokerError) as info:
                authenticate(auth, "Basic " + base64.b64encode(wrong).decode())
            assert info.value.status == 401
        assert len(auth._basic) == 1  # only successes are remembered
        now[0] += 3600  # expired: verified again, still accepted
        assert authenticate(auth, good) is not None

    def test_auth_off(self) -> None:
        assert authenticate(None, None) is None
        authorize(None, Right.ADMIN, "anything")

    @pytest.mark.parametrize(
        "document",
        [
            [],
            {"tokens": {}},
            {"tokens": [{"token": "short"}]},
            {"tokens": [{"token": "long-enough", "produce": "orders"}]},
            {"tokens": [{"token": "long-enough", "rights": []}]},
            {"tokens": [{"token": "long-enough"}, {"token": "long-enough"}]},
        ],
    )
    def test_invalid_files(self, tmp_path: Path, document: object) -> None:
        with pytest.raises(InvalidArgument):
            door_auth(tmp_path, document)

    def test_load_file(self, tmp_path: Path) -> None:
        path = tmp_path / "auth.json"
        path.write_text('{"tokens": [{"token": "abcdefgh", "consume": ["*"]}]}')
        auth = DoorAuth(UsersFile(path), b"s" * 32)
        authorize(authenticate(auth, "Bearer abcdefgh"), Right.CONSUME, "x")
        path.write_text("{")
        with pytest.raises(InvalidUsersFile, match="not valid JSON"):
            UsersFile(path)


def test_render_prometheus_text() -> None:
    metrics = BrokerMetrics()
    metrics.produced("orders", 3, 300, "batch", 0.002)
    metrics.produced("orders", 1, 100, "single", 0.0001)
    metrics.consumed("orders", 2, 200)
    gauges = StoreGauges(
        queue_max_offsets={("orders", 0): 4},
        dispatch_lag_bytes=7,
        group_lag={("g", "orders", 0): 2},
        store_counters={"messages_written": 4},
    )
    text = render(metrics, gauges)
    lines = set(text.splitlines())
    assert 'sparkmq_messages_in_total{door="http",topic="orders"} 4' in lines
    assert 'sparkmq_bytes_in_total{door="http",topic="orders"} 400' in lines
    assert 'sparkmq_messages_out_total{door="http",topic="orders"} 2' in lines
    assert 'sparkmq_produce_latency_seconds_bucket{kind="batch",le="0.0025"} 1' in lines
    assert 'sparkmq_produce_latency_seconds_bucket{kind="batch",le="0.001"} 0' in lines
    assert 'sparkmq_produce_latency_seconds_bucket{kind="single",le="+Inf"} 1' in lines
    assert 'sparkmq_produce_latency_seconds_count{kind="batch"} 1' in lines
    assert 'sparkmq_queue_max_offset{topic="orders",queue_id="0"} 4' in lines
    assert "sparkmq_dispatch_lag_bytes 7" in lines
    assert 'sparkmq_group_lag{group="g",topic="orders",queue_id="0"} 2' in lines
    assert "# TYPE sparkmq_produce_latency_seconds histogram" in lines
    assert text.endswith("\n")


class TestArrivalHub:
    def test_wakes_on_arrival_from_another_thread(self) -> None:
        async def scenario() -> tuple[bool, bool]:
            hub = ArrivalHub(asyncio.get_running_loop())
            max_offset = 0

            async def current() -> int:
                return max_offset

            waiter = asyncio.create_task(hub.wait("t", 0, 0, 10.0, current))
            other = asyncio.create_task(hub.wait("t", 1, 0, 0.05, current))
            while not hub._waiters:  # registered
                await asyncio.sleep(0)
            max_offset = 1
            thread = threading.Thread(target=hub.on_arrival, args=("t", 0, 1))
            thread.start()
            thread.join()
            return await asyncio.wait_for(waiter, 5), await other

        assert asyncio.run(scenario()) == (True, False)

    def test_already_arrived_and_close(self) -> None:
        async def scenario() -> tuple[bool, bool, bool]:
            hub = ArrivalHub(asyncio.get_running_loop())

            async def at(value: int) -> int:
                return value

            early = await hub.wait("t", 0, 3, 10.0, lambda: at(5))
            pending = asyncio.create_task(hub.wait("t", 0, 3, 10.0, lambda: at(3)))
            while not hub._waiters:
                await asyncio.sleep(0)
            hub.close()
            woken = await asyncio.wait_for(pending, 5)
            after = await hub.wait("t", 0, 3, 10.0, lambda: at(3))
            return early, woken, after

        assert asyncio.run(scenario()) == (True, False, False)
