"""Replicas in their own processes, as brokers run: a slave killed with ``kill -9`` in the middle of
catching up (a record cut by a frame on its disk) restarts, recovers, shakes hands again and
converges byte for byte."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Message
from tests.support.proxy import TcpProxy
from tests.support.replicas import Group, commitlog_files
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow  # starts broker processes

ROOT = Path(__file__).resolve().parents[2]

SLAVE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from store import MessageStore
    from store.ha import HAConfig, InMemorySyncStateAuthority, ReplicaController
    from tests.support.stores import tiny_config

    directory, master = Path(sys.argv[1]), sys.argv[2]
    store = MessageStore.open(tiny_config(directory, replicated=True))
    ha = ReplicaController(store, HAConfig(broker_id=2, heartbeat_interval_ms=100,
                                           housekeeping_interval_ms=3000), InMemorySyncStateAuthority())
    ha.become_slave(master, 1)
    print("READY", flush=True)
    sys.stdin.read()
    ha.close()
    store.close()
    """
)


@pytest.fixture
def spawn() -> Iterator[object]:
    children: list[subprocess.Popen[bytes]] = []

    def start(directory: Path, master: str) -> subprocess.Popen[bytes]:
        child = subprocess.Popen(
            [sys.executable, "-c", SLAVE, str(directory), master],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"READY"
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait(30)


def slave_ack(group: Group) -> int:
    slaves = group.nodes[1].ha.status().slaves
    return slaves[0].ack_offset if slaves else -1


def test_a_slave_killed_while_catching_up_recovers_and_converges(group: Group, spawn, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    master = group.node(1, transfer_batch_bytes=3001)  # frames cut records everywhere
    group.elect(master, 1)
    for i in range(1500):
        master.store.put_message(
            Message(topic="orders", body=bytes([i % 256]) * (500 + i % 700), queue_id=i % 4)
        )
    total = master.store.commitlog_max_offset
    directory = tmp_path / "slave"
    host, port = master.ha.ha_address.rsplit(":", 1)
    # A slow link (~3 s for the whole log): the kill lands mid catch-up, not after it.
    with TcpProxy((host, int(port)), rate_bytes_per_s=total // 3) as link:
        child = spawn(directory, link.address)
        wait_until(lambda: slave_ack(group) > total // 3, what="the slave a third of the way")
        link.cut()  # nothing more reaches the slave
        child.send_signal(signal.SIGKILL)  # mid catch-up: its last record may be half on disk
        child.wait(30)
        assert slave_ack(group) < total
    child = spawn(directory, master.ha.ha_address)
    wait_until(lambda: slave_ack(group) == total, timeout_s=60, what="the restarted slave caught up")
    assert child.stdin is not None
    child.stdin.close()
    assert child.wait(30) == 0
    assert commitlog_files(directory) == commitlog_files(master.directory)
