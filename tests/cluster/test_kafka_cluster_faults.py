"""Kafka transactions across broker processes under faults: a participant unreachable when the
commit is decided, then the coordinator killed with ``kill -9`` before it could deliver the
commit there, then both back: every record of the transaction is visible exactly once, on every
broker (real ZooKeeper, real ``sparkmq serve --cluster --kafka-port`` processes, confluent-kafka)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from ingest_api.kafka.txn_record import LedgerEntry, TxnTables, decode_txn_record
from store import KAFKA_TXN_STATE_TOPIC, StoreReader, java_string_hash
from tests.support.cluster import TEST_SESSION_TIMEOUT_MS, ProcessCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]

NAMES = ["b1", "b2", "b3"]
FAST: dict[str, Any] = {
    "socket.timeout.ms": 5000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 200,
    "topic.metadata.refresh.interval.ms": 1000,
}


def bodies(cluster: ProcessCluster, owner: str, topic: str, queue: int) -> list[str]:
    with cluster.http(owner) as http:
        answer = http.get(f"/topics/{topic}/queues/{queue}/messages", params={"offset": 0, "max": 100})
        assert answer.status_code == 200, answer.text
        return [m["body"] for m in answer.json()["messages"]]


def ledger_of(store_dir: Path) -> dict[str, LedgerEntry]:
    """The coordinator's ledger as the records of its state topic say (read beside the running
    broker, read-only)."""
    tables = TxnTables()
    with StoreReader(store_dir) as reader:
        result = reader.read_batch(KAFKA_TXN_STATE_TOPIC, 0, 0, 100_000)
        for body in result.batch.column("body").to_pylist():
            tables.apply(decode_txn_record(body))
    return tables.ledger


def alive(cluster: ProcessCluster, via: str) -> dict[str, bool]:
    return {b["name"]: b["alive"] for b in cluster.describe(via)["brokers"]}


def test_a_decided_commit_reaches_a_paused_participant_after_the_coordinator_is_killed(
    tmp_path: Path,
) -> None:
    with ProcessCluster.started(tmp_path, NAMES, kafka=True) as cluster:
        with cluster.http("b1") as http:
            assert http.put("/topics/tx", json={"queues": 6}).status_code == 201
        owners = [NAMES[q % 3] for q in range(6)]
        for name in NAMES:
            with cluster.http(name) as http:
                wait_until(lambda http=http: http.get("/topics/tx/route").status_code == 200, 10, "route")
        # A transactional id coordinated by b1 (the stable hash over b1, b2, b3).
        tid = next(t for t in (f"tx-{i}" for i in range(100)) if abs(java_string_hash(t)) % 3 == 0)
        kafka_b1 = f"127.0.0.1:{cluster.brokers['b1'].kafka_port}"
        producer = Producer({"bootstrap.servers": kafka_b1, "transactional.id": tid, **FAST})
        producer.init_transactions(30)
        producer.begin_transaction()
        for q in range(6):
            producer.produce("tx", value=f"once-{q}".encode(), partition=q)
        assert producer.flush(30) == 0
        assert all(bodies(cluster, owners[q], "tx", q) == [] for q in range(6))  # halves, invisible

        cluster.brokers["b3"].pause()  # a participant that cannot be reached
        wait_until(lambda: not alive(cluster, "b1")["b3"], TEST_SESSION_TIMEOUT_MS / 1000 * 5, "b3 seen dead")
        producer.commit_transaction(30)  # decided and durable; b3's part still to deliver
        for q in (0, 1, 3, 4):
            assert bodies(cluster, owners[q], "tx", q) == [f"once-{q}"]
        b1_store = cluster.brokers["b1"].store_dir
        (pending,) = ledger_of(b1_store).values()
        assert pending.decision is True and pending.participants == {"b2", "b3"}

        cluster.brokers["b1"].kill()  # the coordinator, with b3's commit undelivered
        cluster.restart("b1")
        cluster.brokers["b3"].resume()
        cluster.wait_live(3, timeout_s=60)
        for q in (2, 5):
            wait_until(
                lambda q=q: bodies(cluster, "b3", "tx", q) == [f"once-{q}"], 60, f"queue {q} committed"
            )
        for q in range(6):
            assert bodies(cluster, owners[q], "tx", q) == [f"once-{q}"]  # exactly once everywhere
        wait_until(lambda: ledger_of(b1_store) == {}, 10, "the ledger emptied")

        # The transactional id goes on: a new producer fences the old one and commits again.
        again = Producer({"bootstrap.servers": kafka_b1, "transactional.id": tid, **FAST})
        again.init_transactions(60)
        again.begin_transaction()
        for q in range(6):
            again.produce("tx", value=f"twice-{q}".encode(), partition=q)
        again.commit_transaction(60)
        for q in range(6):
            assert bodies(cluster, owners[q], "tx", q) == [f"once-{q}", f"twice-{q}"]
