"""Kafka transactions whose partitions span the brokers of a cluster (real ZooKeeper, three
in-process brokers with their gateways, real clients bootstrapped at one broker): records on
every broker committed or aborted together, consumer offsets of ``send_offsets_to_transaction``
applied where the group's offsets live (each queue's owner), exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from store import java_string_hash
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


def coordinated_by(name: str, prefix: str) -> str:
    """A transactional id whose coordinator is broker ``name`` (the stable hash over b1..b3)."""
    index = NAMES.index(name)
    return next(t for t in (f"{prefix}-{i}" for i in range(200)) if abs(java_string_hash(t)) % 3 == index)


def test_a_participant_restarted_mid_transaction_keeps_its_halves_and_asks_the_coordinator(
    trio: KafkaCluster,
) -> None:
    create_topic(trio, "tx-restart")
    tid = coordinated_by("b1", "tx-restart")
    producer = tx_producer(trio.bootstrap("b1"), tid)
    producer.init_transactions(20)
    producer.begin_transaction()
    for q in range(6):
        producer.produce("tx-restart", value=f"before-{q}".encode(), partition=q)
    assert producer.flush(20) == 0
    trio.stop("b3")  # a participant (queues 2 and 5) goes away with open halves ...
    trio.start("b3")  # ... and comes back: they stay open, its announcement is gone
    trio.wait_converged(3)
    for q in range(6):
        producer.produce("tx-restart", value=f"after-{q}".encode(), partition=q)
    assert producer.flush(30) == 0
    producer.commit_transaction(30)
    for q in range(6):
        assert sorted(pulled(trio, "tx-restart", q)) == [f"after-{q}", f"before-{q}"]


def test_a_new_producer_fences_the_old_one_and_aborts_its_transaction_on_every_broker(
    trio: KafkaCluster,
) -> None:
    create_topic(trio, "tx-fence")
    tid = coordinated_by("b2", "tx-fence")
    zombie = tx_producer(trio.bootstrap("b1"), tid)
    zombie.init_transactions(20)
    zombie.begin_transaction()
    for q in range(6):
        zombie.produce("tx-fence", value=b"zombie", partition=q)
    assert zombie.flush(20) == 0
    winner = tx_producer(trio.bootstrap("b3"), tid)
    winner.init_transactions(30)  # aborts the zombie's transaction on b1, b2 and b3
    winner.begin_transaction()
    for q in range(6):
        winner.produce("tx-fence", value=b"winner", partition=q)
    winner.commit_transaction(30)
    zombie.produce("tx-fence", value=b"late", partition=2)  # b3 refuses it: fenced
    with pytest.raises(KafkaException) as err:
        zombie.commit_transaction(10)
    assert err.value.args[0].fatal() or err.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    for q in range(6):
        assert pulled(trio, "tx-fence", q) == ["winner"]


def test_an_aiokafka_transaction_across_brokers_with_offsets(trio: KafkaCluster) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka import TopicPartition as AioPartition

    create_topic(trio, "aio-tx-in")
    create_topic(trio, "aio-tx-out")

    async def scenario() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=trio.bootstrap("b1"), transactional_id="aio-across")
        await producer.start()
        try:
            async with producer.transaction():
                for q in range(6):
                    await producer.send("aio-tx-out", b"c%d" % q, partition=q)
                offsets = {AioPartition("aio-tx-in", q): q + 1 for q in range(6)}
                await producer.send_offsets_to_transaction(offsets, "aio-ctp")
            await producer.begin_transaction()
            for q in range(6):
                await producer.send_and_wait("aio-tx-out", b"aborted", partition=q)
            await producer.send_offsets_to_transaction({AioPartition("aio-tx-in", 0): 40}, "aio-ctp")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(scenario(), 90))
    assert committed_over_http(trio, "aio-ctp", "aio-tx-in") == {q: q + 1 for q in range(6)}
    assert [pulled(trio, "aio-tx-out", q) for q in range(6)] == [[f"c{q}"] for q in range(6)]


def test_an_open_transaction_survives_a_restart_of_its_coordinator(trio: KafkaCluster) -> None:
    create_topic(trio, "tx-coord")
    tid = coordinated_by("b2", "tx-coord")  # b2 owns queues 1 and 4; the rest are elsewhere
    producer = tx_producer(trio.bootstrap("b1"), tid)
    producer.init_transactions(20)
    producer.begin_transaction()
    for q in range(6):
        producer.produce("tx-coord", value=f"before-{q}".encode(), partition=q)
    assert producer.flush(20) == 0
    trio.stop("b2")  # the coordinator, with the transaction open on three brokers
    trio.start("b2")
    trio.wait_converged(3)
    for q in range(6):
        producer.produce("tx-coord", value=f"after-{q}".encode(), partition=q)
    assert producer.flush(30) == 0
    producer.commit_transaction(60)  # the restarted coordinator knew it from its ledger
    for q in range(6):
        assert sorted(pulled(trio, "tx-coord", q)) == [f"after-{q}", f"before-{q}"]
