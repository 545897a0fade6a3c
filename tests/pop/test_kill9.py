"""kill -9 of a process running POP consumption: no answered ack is lost, nothing unacked is.

A child (tests/pop/kill9_child.py) receives and acks over a real store, printing each ack once
answered; it is killed with SIGKILL mid-stream. The store is reopened here with a clock one
minute ahead (every invisible time has passed), and the messages are drained. Message by
message: an answered ack is never delivered again; every message whose ack was not even
attempted comes back; one whose ack was in flight at the kill may go either way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from broker.pop import PopConfig, PopService
from store import Message, MessageStore, wall_clock_ms
from tests.support.stores import light_config
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
COUNT = 600


def test_kill9_loses_no_answered_ack_and_no_unacked_message(tmp_path: Path) -> None:
    with MessageStore.open(light_config(tmp_path)) as store:
        store.create_topic("t", 4)
        store.put_messages([Message(topic="t", body=b"m%d" % i) for i in range(COUNT)])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.pop.kill9_child", str(tmp_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    stdout = child.stdout
    assert stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")), daemon=True)
    reader.start()
    try:
        wait_until(lambda: sum(line.startswith("ACK") for line in lines) >= 40, timeout_s=60)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        reader.join(timeout=10)
    acked = {name.encode() for line in lines if line.startswith("ACK ") for name in line.split()[1:]}
    tried = {name.encode() for line in lines if line.startswith("TRY ") for name in line.split()[1:]}
    assert len(acked) >= 40

    store = MessageStore.open(light_config(tmp_path), clock_ms=lambda: wall_clock_ms() + 60_000)
    service = PopService(store, PopConfig(background=False))
    try:
        back: list[bytes] = []
        while got := service.receive("g", "t", 32, 600_000):
            back += [r.message.body for r in got]
        assert len(back) == len(set(back)), "a message came back twice in one drain"
        assert acked.isdisjoint(back), f"answered acks redelivered: {sorted(acked & set(back))[:10]}"
        everything = {b"m%d" % i for i in range(COUNT)}
        must_return = everything - tried
        assert must_return <= set(back), f"unacked messages lost: {sorted(must_return - set(back))[:10]}"
        assert set(back) | acked | tried == everything
    finally:
        service.close()
        store.close()
