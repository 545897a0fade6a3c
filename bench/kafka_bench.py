"""Kafka gateway throughput: produce and consume msgs/s of 100-byte messages.

Runs the gateway in a separate process (``python -m ingest_api.kafka``, its own GIL) on a
temporary store, then drives it with confluent-kafka (librdkafka) and kafka-python::

    .venv/bin/python -m bench.kafka_bench                    # defaults below
    .venv/bin/python -m bench.kafka_bench --messages 500000 --clients confluent

``confluent-tx`` is confluent-kafka's transactional producer (``transactional.id``,
transactions of ``--tx-size`` messages, each committed before the next begins) and a
``read_committed`` consumer; its produce rate is also printed as a ratio to the plain
(``acks=1``) and the idempotent (``confluent-idem``: ``acks=all``, what a transactional
producer is besides) confluent produce of the same run.

Figures depend heavily on the machine and on what else runs on it; this prints them, it does
not gate anything.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from bench.http_bench import cpu_seconds

MESSAGE = b"x" * 100
PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_gateway(store_dir: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ingest_api.kafka",
            "--store-dir",
            str(store_dir),
            "--port",
            str(port),
            "--initial-rebalance-delay-ms",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("gateway exited during startup") from None
            time.sleep(0.05)
    process.kill()
    raise TimeoutError("gateway did not start")


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(10)


def confluent_produce(bootstrap: str, topic: str, count: int, idempotent: bool = False) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            **({"enable.idempotence": True} if idempotent else {"acks": 1}),
        }
    )
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, MESSAGE)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - started
    assert remaining == 0, f"{remaining} messages not delivered"
    return elapsed


def confluent_tx_produce(bootstrap: str, topic: str, count: int, tx_size: int = 1000) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{topic}",
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(30)
    started = time.perf_counter()
    for first in range(0, count, tx_size):
        producer.begin_transaction()
        for _ in range(min(tx_size, count - first)):
            while True:
                try:
                    producer.produce(topic, MESSAGE)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(120)
    return time.perf_counter() - started


def confluent_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-ck",
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "isolation.level": "read_committed",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(10_000, 1.0) if not m.error())
    elapsed = time.perf_counter() - started
    consumer.close()
    assert got >= count, f"consumed only {got}"
    return elapsed


def kafka_python_produce(bootstrap: str, topic: str, count: int) -> float:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, batch_size=512 * 1024, acks=1, enable_idempotence=False
    )
    started = time.perf_counter()
    for _ in range(count):
        producer.send(topic, MESSAGE)
    producer.flush(300)
    elapsed = time.perf_counter() - started
    producer.close()
    return elapsed


def kafka_python_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=50 * 1024 * 1024,
    )
    partitions = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < count and time.monotonic() < deadline:
        got += sum(len(records) for records in consumer.poll(1000, max_records=50_000).values())
    elapsed = time.perf_counter() - started
    consumer.close()
    assert got >= count, f"consumed only {got}"
    return elapsed


CLIENTS: dict[str, tuple[Callable[[str, str, int], float], Callable[[str, str, int], float]]] = {
    "confluent": (confluent_produce, confluent_consume),
    "confluent-idem": (partial(confluent_produce, idempotent=True), confluent_consume),
    "confluent-tx": (confluent_tx_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000, help="per client (confluent)")
    parser.add_argument("--kafka-python-messages", type=int, default=60_000)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--tx-size", type=int, default=1000, help="messages per transaction (confluent-tx)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kafka-bench-") as tmp:
        port = free_port()
        gateway = start_gateway(Path(tmp) / "store", port)
        bootstrap = f"127.0.0.1:{port}"
        try:
            print(
                f"gateway pid {gateway.pid} on {bootstrap}; {os.cpu_count()} CPUs (shared); 100-byte messages"
            )
            print(
                f"{'client':<14}{'messages':>10}{'produce msg/s':>16}{'consume msg/s':>16}"
                f"{'gw CPU us/msg in':>18}{'gw CPU us/msg out':>19}"
            )
            rates: dict[str, float] = {}
            for name in args.clients:
                produce, consume = CLIENTS[name]
                count = args.messages if name.startswith("confluent") else args.kafka_python_messages
                topic = f"bench-{name}"
                create_topic(bootstrap, topic)
                cpu_0 = cpu_seconds(gateway.pid)
                if name == "confluent-tx":
                    produce_s = confluent_tx_produce(bootstrap, topic, count, args.tx_size)
                else:
                    produce_s = produce(bootstrap, topic, count)
                cpu_1 = cpu_seconds(gateway.pid)
                consume_s = consume(bootstrap, topic, count)
                cpu_2 = cpu_seconds(gateway.pid)
                rates[name] = count / produce_s
                print(
                    f"{name:<14}{count:>10}{count / produce_s:>16,.0f}{count / consume_s:>16,.0f}"
                    f"{(cpu_1 - cpu_0) / count * 1e6:>18.2f}{(cpu_2 - cpu_1) / count * 1e6:>19.2f}"
                )
            print("gw CPU: the gateway process's CPU time per message (independent of machine load)")
            for base in ("confluent", "confluent-idem"):
                if base in rates and "confluent-tx" in rates:
                    print(
                        f"transactional / {base} produce ({args.tx_size}-message transactions): "
                        f"{rates['confluent-tx'] / rates[base]:.2f}x"
                    )
        finally:
            gateway.terminate()
            gateway.wait(30)


if __name__ == "__main__":
    main()
