"""Kafka produce against two brokers of a cluster vs one broker, in the same run (issue 21: >= 1.5x).

    python -m bench.cluster_kafka                     # its own ZooKeeper; 3 rounds of 5 s
    python -m bench.cluster_kafka --rounds 5 --seconds 8

or, from ``bench.cluster_bench`` (which owns the ZooKeeper): ``cluster_kafka.ratio(zookeeper,
seconds)``.

Setups, all started once and idle while another is measured:

* **one broker**: a lone ``sparkmq serve --kafka-port`` (no cluster), topic ``bench`` with 8
  queues;
* **two brokers**: ``sparkmq serve --cluster ... --kafka-port`` processes ``k1`` and ``k2`` on one
  ZooKeeper, topic ``bench`` with 8 queues spread over both (4 each); the client bootstraps at
  ``k1`` and learns every partition's leader from Metadata.

The load is confluent-kafka (librdkafka) producers of 100-byte unkeyed messages, ``acks=1``,
``linger.ms=5``, as ``bench.kafka_bench``; ``CLIENT_PROCESSES`` producer processes run for
``seconds`` each, then flush; a figure is delivered messages / elapsed time summed over them.
The rounds interleave the setups and the medians are compared, so the ratio compares figures
measured back to back on this shared machine. Prints figures, gates nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from cluster.local_zookeeper import LocalZooKeeper

MESSAGE = b"x" * 100
QUEUES = 8
#: Producer processes per measure (each one librdkafka client producing as fast as it can).
CLIENT_PROCESSES = 2
TOPIC = "bench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class KafkaBroker:
    name: str
    http: str
    bootstrap: str


def _wait_healthy(broker: KafkaBroker, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{broker.http}/healthz", timeout=1).status_code == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"broker {broker.name} did not start")
        time.sleep(0.1)


@contextlib.contextmanager
def kafka_brokers(names: list[str], zk_url: str | None) -> Iterator[list[KafkaBroker]]:
    """``sparkmq serve --kafka-port`` processes on temporary stores (in a cluster when ``zk_url``)."""
    with tempfile.TemporaryDirectory(prefix="sparkmq-kafka-bench-") as root:
        processes: list[subprocess.Popen[bytes]] = []
        brokers: list[KafkaBroker] = []
        try:
            for name in names:
                port, kafka_port = _free_port(), _free_port()
                command = [
                    sys.executable, "-m", "sparkmq.cli", "serve", "--store-dir", f"{root}/{name}",
                    "--port", str(port), "--kafka-port", str(kafka_port), "--log-level", "warning",
                    "--operators", "off", "--checkpoint-dir", f"{root}/checkpoints-{name}",
                ]  # fmt: skip
                if zk_url is not None:
                    command += ["--cluster", zk_url, "--broker-name", name]
                processes.append(
                    subprocess.Popen(
                        command, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                    )
                )
                brokers.append(KafkaBroker(name, f"http://127.0.0.1:{port}", f"127.0.0.1:{kafka_port}"))
            for broker, process in zip(brokers, processes, strict=True):
                _wait_healthy(broker, process)
            yield brokers
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def _create_topic(broker: KafkaBroker, brokers: int) -> None:
    answer = httpx.put(f"{broker.http}/topics/{TOPIC}", json={"queues": QUEUES}, timeout=30)
    answer.raise_for_status()
    if brokers > 1:
        owners = {q["broker"] for q in httpx.get(f"{broker.http}/topics/{TOPIC}/route").json()["queues"]}
        if len(owners) != brokers:
            raise RuntimeError(f"topic {TOPIC} is on {sorted(owners)}, expected {brokers} brokers")


def _produce_for(bootstrap: str, seconds: float) -> tuple[int, float]:
    """One client process: produce for ``seconds``, flush; (delivered, elapsed seconds)."""
    from confluent_kafka import Producer

    delivered = 0

    def count(err: object, _: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
        }
    )
    producer.list_topics(TOPIC, timeout=30)  # metadata (every leader) before the clock starts
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(1000):
            try:
                producer.produce(TOPIC, MESSAGE, on_delivery=count)
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return delivered, elapsed


def _measure(pool: ProcessPoolExecutor, bootstrap: str, seconds: float) -> float:
    """Messages per second of ``CLIENT_PROCESSES`` producers together."""
    results = list(pool.map(_produce_for, [bootstrap] * CLIENT_PROCESSES, [seconds] * CLIENT_PROCESSES))
    return sum(delivered / elapsed for delivered, elapsed in results)


def ratio(zookeeper: LocalZooKeeper, seconds: float = 5.0, rounds: int = 3) -> float:
    """confluent-kafka produce: two brokers of a cluster / one lone broker (medians of
    ``rounds`` interleaved rounds); prints each round's msg/s, the medians and the ratio."""
    with contextlib.ExitStack() as stack:
        (lone,) = stack.enter_context(kafka_brokers(["lone"], None))
        pair = stack.enter_context(kafka_brokers(["k1", "k2"], zookeeper.url("/kafka-bench")))
        _create_topic(lone, 1)
        _create_topic(pair[0], 2)
        pool = stack.enter_context(ProcessPoolExecutor(CLIENT_PROCESSES))
        _measure(pool, lone.bootstrap, 1.0)  # warm up both, clients included
        _measure(pool, pair[0].bootstrap, 1.0)
        one: list[float] = []
        two: list[float] = []
        for round_no in range(1, rounds + 1):
            one.append(_measure(pool, lone.bootstrap, seconds))
            two.append(_measure(pool, pair[0].bootstrap, seconds))
            print(f"  kafka round {round_no}: 1 broker {one[-1]:>10,.0f} msg/s", end="")
            print(f"   2 brokers {two[-1]:>10,.0f} msg/s", flush=True)
        single, double = statistics.median(one), statistics.median(two)
        print(f"  confluent-kafka produce, 1 broker   {single:>12,.0f} msg/s (median of {rounds})")
        print(f"  confluent-kafka produce, 2 brokers  {double:>12,.0f} msg/s (median of {rounds})")
        print(f"  ratio 2 brokers / 1 broker          {double / single:>12.2f}x   goal >= 1.5x")
        return double / single


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="sparkmq-zk-") as zk_dir:
        zookeeper = LocalZooKeeper(Path(zk_dir), _free_port()).start()
        try:
            ratio(zookeeper, args.seconds, args.rounds)
        finally:
            zookeeper.stop()


if __name__ == "__main__":
    main()
