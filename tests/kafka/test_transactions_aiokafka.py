"""Kafka transactions with aiokafka (the asyncio client the issue first tried): its transactional
producer commits and aborts with offsets, a second producer fences the first, and its
read_committed consumer sees exactly the committed records."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from store import MessageStore

pytestmark = pytest.mark.kafka


def run(coroutine: Awaitable[object]) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, 60))  # type: ignore[arg-type]


async def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await reader.start()
    try:
        reader.assign([TopicPartition(topic, p) for p in range(partitions)])
        await reader.seek_to_beginning()
        got: list[bytes] = []
        while batch := await reader.getmany(timeout_ms=1500):
            got.extend(m.value for records in batch.values() for m in records)
        return sorted(got)
    finally:
        await reader.stop()


def test_commit_and_abort_with_offsets(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("aio-in", 2)
    store.create_topic("aio-out", 2)

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-tx")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(6):
                    await producer.send("aio-out", b"c%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction({TopicPartition("aio-in", 1): 3}, "aio-ctp")
                assert store.committed_offsets("aio-ctp", "aio-in") == {}
            assert store.committed_offsets("aio-ctp", "aio-in") == {1: 3}
            await producer.begin_transaction()
            await producer.send_and_wait("aio-out", b"aborted", partition=0)
            await producer.send_offsets_to_transaction({TopicPartition("aio-in", 1): 9}, "aio-ctp")
            await producer.abort_transaction()
            assert store.committed_offsets("aio-ctp", "aio-in") == {1: 3}
        finally:
            await producer.stop()
        return await committed_values(bootstrap, "aio-out", 2)

    assert run(scenario()) == sorted(b"c%d" % i for i in range(6))


def test_a_second_producer_fences_the_first(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("aio-fence", 1)

    async def scenario() -> list[bytes]:
        first = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-fenced")
        second = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-fenced")
        await first.start()
        try:
            await first.begin_transaction()
            await first.send_and_wait("aio-fence", b"zombie", partition=0)
            await second.start()
            async with second.transaction():
                await second.send("aio-fence", b"winner", partition=0)
            with pytest.raises(KafkaError):
                await first.commit_transaction()
        finally:
            await second.stop()
            await first.stop()
        return await committed_values(bootstrap, "aio-fence", 1)

    assert run(scenario()) == [b"winner"]
