"""A POP group is not consumed by offsets: a Kafka client's OffsetCommit for it is refused."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from broker.pop import PopService
from store import Message, MessageStore

pytestmark = pytest.mark.kafka


def test_an_offset_commit_for_a_pop_group_is_refused(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("pk", 1)
    store.put_messages([Message(topic="pk", body=b"x")])
    pop = PopService(store)
    try:
        assert len(pop.receive("popg", "pk", 1, 60_000)) == 1  # popg is now a POP group
        client = Consumer({"bootstrap.servers": bootstrap, "group.id": "popg", "enable.auto.commit": False})
        try:
            with pytest.raises(KafkaException, match=r"INVALID_GROUP_ID|invalid"):
                client.commit(offsets=[TopicPartition("pk", 0, 1)], asynchronous=False)
        finally:
            client.close()
        assert store.committed_offsets("popg", "pk") == {}  # nothing was committed
    finally:
        pop.close()
