"""Kafka transactions with kafka-python 3.0 (its transactional producer, read_committed consumer
and KIP-664 admin calls: ListTransactions, DescribeTransactions)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from store import MessageStore
from tests.kafka.test_kafka_python import CONSUMER, FAST

pytestmark = pytest.mark.kafka


def tx_producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, linger_ms=2, **FAST)


def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    reader = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", consumer_timeout_ms=2000, **CONSUMER
    )
    try:
        reader.assign([TopicPartition(topic, p) for p in range(partitions)])
        return sorted(m.value for m in reader)
    finally:
        reader.close()


@pytest.fixture
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, **FAST)
    yield client
    client.close()


def test_commit_abort_offsets_and_admin_views(
    bootstrap: str, store: MessageStore, admin: KafkaAdminClient
) -> None:
    store.create_topic("kp-in", 2)
    store.create_topic("kp-out", 2)
    producer = tx_producer(bootstrap, "kp-tx")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send("kp-out", value=b"c%d" % i, partition=i % 2)
        producer.send_offsets_to_transaction(
            {
                TopicPartition("kp-in", 0): OffsetAndMetadata(4, "", -1),
                TopicPartition("kp-in", 1): OffsetAndMetadata(6, "", -1),
            },
            "kp-ctp",
        )
        assert store.committed_offsets("kp-ctp", "kp-in") == {}
        producer.commit_transaction()
        assert store.committed_offsets("kp-ctp", "kp-in") == {0: 4, 1: 6}

        producer.begin_transaction()
        producer.send("kp-out", value=b"aborted", partition=0).get(10)  # stored as a half
        producer.send_offsets_to_transaction(
            {TopicPartition("kp-in", 0): OffsetAndMetadata(99, "", -1)}, "kp-ctp"
        )
        listing = admin.list_transactions()
        assert [(t.transactional_id, t.state.value) for rows in listing.values() for t in rows] == [
            ("kp-tx", "Ongoing")
        ]
        description = admin.describe_transactions(["kp-tx"])["kp-tx"]
        assert description.state.value == "Ongoing" and description.topic_partitions == {
            TopicPartition("kp-out", 0)
        }
        producer.abort_transaction()
        assert store.committed_offsets("kp-ctp", "kp-in") == {0: 4, 1: 6}
        assert admin.describe_transactions(["kp-tx"])["kp-tx"].state.value == "CompleteAbort"
    finally:
        producer.close()
    assert committed_values(bootstrap, "kp-out", 2) == sorted(b"c%d" % i for i in range(10))


def test_a_second_producer_fences_the_first(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("kp-fence", 1)
    first = tx_producer(bootstrap, "kp-fenced")
    second = tx_producer(bootstrap, "kp-fenced")
    try:
        first.init_transactions()
        first.begin_transaction()
        first.send("kp-fence", value=b"zombie", partition=0).get(10)
        second.init_transactions()
        second.begin_transaction()
        second.send("kp-fence", value=b"winner", partition=0)
        second.commit_transaction()
        with pytest.raises(KafkaError):
            first.commit_transaction()
    finally:
        first.close(timeout=1)
        second.close()
    assert committed_values(bootstrap, "kp-fence", 1) == [b"winner"]
