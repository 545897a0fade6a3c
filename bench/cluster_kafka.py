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
``linger.ms=5``, as ``bench.kafka_bench``, handed over 1,000 at a time (``produce_batch``,
delivery reports for errors only: little client CPU per message); ``CLIENT_PROCESSES`` producer
processes run for ``seconds`` each, then flush; a figure is delivered messages / elapsed time
summed over them. Each setup's broker and client CPU per message are printed too: on a
2-core machine that runs the clients as well, they bound the ratio (see the report in
docs/kafka_gateway.md#benchmark).
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

from bench.http_bench import cpu_seconds
from cluster.local_zookeeper import LocalZooKeeper

MESSAGE = b"x" * 100
QUEUES = 8
#: Producer processes per measure (each one librdkafka client producing as fast as it can).
CLIENT_PROCESSES = 2
#: Messages per ``produce_batch`` call.
CLIENT_BATCH = 1000
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
    pid: int


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
                process = subprocess.Popen(
                    command, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                processes.append(process)
                http, bootstrap = f"http://127.0.0.1:{port}", f"127.0.0.1:{kafka_port}"
                brokers.append(KafkaBroker(name, http, bootstrap, process.pid))
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


def _produce_for(bootstrap: str, seconds: float) -> tuple[int, float, float]:
    """One client process: produce for ``seconds``, flush; (delivered, elapsed seconds, this
    process's CPU seconds, librdkafka's threads included). Messages go in batches of
    ``CLIENT_BATCH`` (``produce_batch``) with delivery reports for errors only, so the client
    spends little CPU per message and the brokers are what is measured."""
    from confluent_kafka import Producer

    failed = 0

    def count_failure(err: object, _: object) -> None:
        nonlocal failed
        failed += 1

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "acks": 1,
            "delivery.report.only.error": True,
        }
    )
    producer.list_topics(TOPIC, timeout=30)  # metadata (every leader) before the clock starts
    batch = [{"value": MESSAGE}] * CLIENT_BATCH
    sent = 0
    cpu_started = time.process_time()
    started = time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        try:
            sent += producer.produce_batch(TOPIC, batch, on_delivery=count_failure)
        except BufferError:
            producer.poll(0.005)
        producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    if remaining or failed:
        raise RuntimeError(f"{remaining} messages not delivered, {failed} failed")
    return sent, elapsed, time.process_time() - cpu_started


@dataclass(frozen=True)
class Figure:
    messages_per_s: float
    #: Broker CPU time per message delivered (all brokers of the setup together).
    broker_cpu_us: float
    #: Client CPU time per message (the producer processes, librdkafka included).
    client_cpu_us: float


def _measure(pool: ProcessPoolExecutor, brokers: list[KafkaBroker], seconds: float) -> Figure:
    """``CLIENT_PROCESSES`` producers together, bootstrapped at the first broker."""
    before = sum(cpu_seconds(b.pid) for b in brokers)
    bootstrap = [brokers[0].bootstrap] * CLIENT_PROCESSES
    results = list(pool.map(_produce_for, bootstrap, [seconds] * CLIENT_PROCESSES))
    used = sum(cpu_seconds(b.pid) for b in brokers) - before
    delivered = max(sum(count for count, _, _ in results), 1)
    client = sum(cpu for _, _, cpu in results)
    rate = sum(count / elapsed for count, elapsed, _ in results)
    return Figure(rate, used / delivered * 1e6, client / delivered * 1e6)


def ratio(zookeeper: LocalZooKeeper, seconds: float = 5.0, rounds: int = 3) -> float:
    """confluent-kafka produce: two brokers of a cluster / one lone broker (medians of
    ``rounds`` interleaved rounds); prints each round's msg/s, the medians and the ratio."""
    with contextlib.ExitStack() as stack:
        (lone,) = stack.enter_context(kafka_brokers(["lone"], None))
        pair = stack.enter_context(kafka_brokers(["k1", "k2"], zookeeper.url("/kafka-bench")))
        _create_topic(lone, 1)
        _create_topic(pair[0], 2)
        pool = stack.enter_context(ProcessPoolExecutor(CLIENT_PROCESSES))
        _measure(pool, [lone], 1.0)  # warm up both, clients included
        _measure(pool, pair, 1.0)
        one: list[Figure] = []
        two: list[Figure] = []
        for round_no in range(1, rounds + 1):
            one.append(_measure(pool, [lone], seconds))
            two.append(_measure(pool, pair, seconds))
            print(f"  kafka round {round_no}: 1 broker {one[-1].messages_per_s:>10,.0f} msg/s", end="")
            print(f"   2 brokers {two[-1].messages_per_s:>10,.0f} msg/s", flush=True)
        single = statistics.median(f.messages_per_s for f in one)
        double = statistics.median(f.messages_per_s for f in two)
        for label, figures in (("1 broker ", one), ("2 brokers", two)):
            rate = statistics.median(f.messages_per_s for f in figures)
            broker_cpu = statistics.median(f.broker_cpu_us for f in figures)
            client_cpu = statistics.median(f.client_cpu_us for f in figures)
            print(
                f"  confluent-kafka produce, {label}  {rate:>10,.0f} msg/s   CPU per message: "
                f"brokers {broker_cpu:.1f} us, clients {client_cpu:.1f} us"
            )
        print(f"  ratio 2 brokers / 1 broker          {double / single:>10.2f}x   goal >= 1.5x")
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
