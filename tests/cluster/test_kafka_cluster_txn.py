"""Kafka transactions whose partitions span the brokers of a cluster (real ZooKeeper, three
in-process brokers with their gateways, real clients bootstrapped at one broker): records on
every broker committed or aborted together, consumer offsets of ``send_offsets_to_transaction``
applied where the group's offsets live (each queue's owner), exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.cluster.kafka_cluster import KafkaCluster
from tests.cluster.test_kafka_cluster import (
    FAST,
    NAMES,
    ck_consumer,
    ck_poll,
    committed_over_http,
    create_topic,
    pulled,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def trio(zk_url: str, tmp_path: Path) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster(zk_url, tmp_path)
    for name in NAMES:
        cluster.start(name)
    cluster.wait_converged(3)
    yield cluster
    cluster.stop_all()


def tx_producer(bootstrap: str, transactional_id: str, **config: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            **FAST,
            **config,
        }
    )


def test_a_transaction_across_three_brokers_commits_and_aborts_everywhere(trio: KafkaCluster) -> None:
    create_topic(trio, "tx-in")
    create_topic(trio, "tx-out")
    feeder = Producer({"bootstrap.servers": trio.bootstrap("b1"), **FAST})
    for q in range(6):
        for i in range(2):
            feeder.produce("tx-in", value=f"in-{q}-{i}".encode(), partition=q)
    assert feeder.flush(20) == 0

    source = ck_consumer(trio.bootstrap("b1"), "tx-ctp")
    producer = tx_producer(trio.bootstrap("b1"), "tx-across")
    try:
        source.subscribe(["tx-in"])
        consumed = ck_poll(source, 12)
        producer.init_transactions(20)
        producer.begin_transaction()
        for m in consumed:
            producer.produce("tx-out", value=b"out:" + m.value(), partition=m.partition())
        positions = source.position(source.assignment())
        producer.send_offsets_to_transaction(positions, source.consumer_group_metadata(), 20)
        assert committed_over_http(trio, "tx-ctp", "tx-in") == dict.fromkeys(range(6), -1)
        assert all(pulled(trio, "tx-out", q) == [] for q in range(6))  # halves: invisible
        producer.commit_transaction(20)
        assert committed_over_http(trio, "tx-ctp", "tx-in") == dict.fromkeys(range(6), 2)
        for q in range(6):
            assert sorted(pulled(trio, "tx-out", q)) == [f"out:in-{q}-{i}" for i in range(2)]

        producer.begin_transaction()
        for q in range(6):
            producer.produce("tx-out", value=b"aborted", partition=q)
        producer.send_offsets_to_transaction(
            [TopicPartition("tx-in", q, 99) for q in range(6)], source.consumer_group_metadata(), 20
        )
        producer.abort_transaction(20)
    finally:
        source.close()
    assert committed_over_http(trio, "tx-ctp", "tx-in") == dict.fromkeys(range(6), 2)
    for q in range(6):
        assert sorted(pulled(trio, "tx-out", q)) == [f"out:in-{q}-{i}" for i in range(2)]
