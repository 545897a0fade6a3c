"""Exactly once under ``kill -9``: a consume-transform-produce loop (confluent-kafka, topic A ->
topic B, offsets in the transaction) against a real gateway process; both are SIGKILLed at
seeded random points of the loop's progress and restarted. Afterwards B holds every record of
A, transformed, exactly once, and the group's offsets are at the end of A.

``CTP_KILL_SEED`` picks another schedule (the seed is printed on failure).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.ctp_loop import GROUP, SINGLE_BROKER, SINK, SOURCE
from tests.kafka.test_confluent import poll_values
from tests.support.network import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("CTP_KILL_SEED", "20261125"))
RECORDS, PARTITIONS, BATCH, KILLS = 3000, 3, 25, 6


class Processes:
    """The gateway and the loop as child processes, each restartable, logs kept."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.gateway: subprocess.Popen[bytes] | None = None
        self.loop: subprocess.Popen[bytes] | None = None
        self.starts = {"gateway": 0, "loop": 0}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        self.starts[name] += 1
        log = open(self.tmp_path / f"{name}-{self.starts[name]}.log", "wb")  # noqa: SIM115 (child owns it)
        return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def start_gateway(self) -> None:
        store = str(self.tmp_path / "store")
        self.gateway = self._spawn(
            "gateway",
            [
                "-m",
                "ingest_api.kafka",
                "--store-dir",
                store,
                "--port",
                str(self.port),
                "--initial-rebalance-delay-ms",
                "0",
            ],
        )

        def listening() -> bool:
            assert self.gateway is not None and self.gateway.poll() is None, self.logs("gateway")
            try:
                import socket

                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_until(listening, 30, "the gateway to listen")

    def start_loop(self) -> None:
        self.loop = self._spawn(
            "loop", ["-m", "tests.kafka.ctp_loop", self.bootstrap, str(PARTITIONS), str(BATCH)]
        )

    def kill(self, name: str) -> None:
        process = self.gateway if name == "gateway" else self.loop
        assert process is not None
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(30)

    def logs(self, name: str) -> str:
        texts = [p.read_text(errors="replace")[-2000:] for p in sorted(self.tmp_path.glob(f"{name}-*.log"))]
        return f"seed {SEED}; {name} logs:\n" + "\n---\n".join(texts)

    def stop(self) -> None:
        for process in (self.loop, self.gateway):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGKILL)
                process.wait(30)


def progress(offsets: Consumer) -> int:
    """How many records of A the committed transactions consumed (-1 while unreachable)."""
    try:
        committed = offsets.committed([TopicPartition(SOURCE, p) for p in range(PARTITIONS)], timeout=2)
    except KafkaException:
        return -1
    return sum(max(tp.offset, 0) for tp in committed)


def supervise(processes: Processes) -> bool:
    """Restart the loop if it died on its own (a fatal error: fenced, ...); True once it is done."""
    loop = processes.loop
    assert loop is not None
    code = loop.poll()
    if code == 0:
        return True
    if code is not None:
        assert processes.starts["loop"] < 40, processes.logs("loop")
        processes.start_loop()
    return False


def test_consume_transform_produce_is_exactly_once_across_kill_9(processes: Processes) -> None:
    admin = AdminClient({"bootstrap.servers": processes.bootstrap})
    for topic in (SOURCE, SINK):
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(15)
    feeder = Producer({"bootstrap.servers": processes.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    values = [b"%05d" % i for i in range(RECORDS)]
    for i, value in enumerate(values):
        feeder.produce(SOURCE, value=value, partition=i % PARTITIONS)
    assert feeder.flush(30) == 0

    rng = random.Random(SEED)
    points = sorted(rng.sample(range(BATCH, RECORDS - BATCH), KILLS))
    victims = [rng.choice(["gateway", "loop"]) for _ in points]
    offsets = Consumer(
        {
            "bootstrap.servers": processes.bootstrap,
            "group.id": GROUP,
            "socket.timeout.ms": 2000,
            **SINGLE_BROKER,
        }
    )
    try:
        processes.start_loop()
        for point, victim in zip(points, victims, strict=True):
            wait_until(
                lambda p=point: supervise(processes) or progress(offsets) >= p, 60, f"progress {point}"
            )
            processes.kill(victim)
            if victim == "gateway":
                processes.start_gateway()
            else:
                processes.start_loop()
        wait_until(lambda: supervise(processes), 90, "the loop to finish")
        committed = offsets.committed([TopicPartition(SOURCE, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == dict.fromkeys(
            range(PARTITIONS), RECORDS // PARTITIONS
        )
    finally:
        offsets.close()

    reader = Consumer(
        {
            "bootstrap.servers": processes.bootstrap,
            "group.id": "ctp-check",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        reader.assign([TopicPartition(SINK, p, 0) for p in range(PARTITIONS)])
        got = sorted(m.value() for m in poll_values(reader, RECORDS, timeout_s=60))
    finally:
        reader.close()
    expected = sorted(b"b:" + v for v in values)
    missing, duplicated = set(expected) - set(got), len(got) - len(set(got))
    assert (len(got), len(missing), duplicated) == (RECORDS, 0, 0), processes.logs("loop")
    assert got == expected
    assert processes.starts["gateway"] >= 1 + victims.count("gateway")
