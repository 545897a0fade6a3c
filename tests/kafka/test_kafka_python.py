"""Black-box scenarios with kafka-python 3.0 (the pure-Python reference client)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

from broker.offsets import commit_offsets
from broker.pop import PopConfig, PopService
from store import Message, MessageStore
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

FAST = {"request_timeout_ms": 5000, "metadata_max_age_ms": 2000, "reconnect_backoff_ms": 20}
CONSUMER = {
    **FAST,
    "auto_offset_reset": "earliest",
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 200,
    "fetch_max_wait_ms": 100,
}


def producer(bootstrap: str, **config: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, **FAST, **config)


@pytest.fixture
def admin(bootstrap: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap, **FAST)
    yield client
    client.close()


def stored_values(store: MessageStore, topic: str) -> list[bytes]:
    values: list[bytes] = []
    for queue_id in range(store.queue_count(topic)):
        batch = store.read_batch(topic, queue_id, 0, 10_000).batch
        values.extend(batch.column("body").to_pylist())
    return values


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_flush_every_compression_and_acks(
    bootstrap: str, store: MessageStore, compression: str | None, acks: int | str
) -> None:
    topic = f"kp-{compression or 'none'}-{acks}"
    client = producer(bootstrap, compression_type=compression, acks=acks, enable_idempotence=acks == "all")
    try:
        sent = [b"value-%03d " % i * 8 for i in range(40)]  # compressible, so codecs really apply
        futures = [client.send(topic, value=v, key=b"k%d" % i) for i, v in enumerate(sent)]
        client.flush(10)
        if acks != 0:
            offsets = [f.get(5).offset for f in futures]
            assert all(o >= 0 for o in offsets)
    finally:
        client.close(5)
    wait_until(lambda: len(stored_values(store, topic)) == len(sent), 10, "every record stored")
    assert sorted(stored_values(store, topic)) == sorted(sent)


def test_group_consumer_with_auto_commit(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("kp%2Egroup", 3)  # Kafka "kp.group" (see ingest_api/kafka/names.py)
    client = producer(bootstrap)
    for i in range(60):
        client.send("kp.group", value=b"m%d" % i, key=b"key-%d" % (i % 7), headers=[("n", str(i).encode())])
    client.flush(10)
    client.close(5)
    consumer = KafkaConsumer(
        "kp.group", bootstrap_servers=bootstrap, group_id="kp.g1", auto_commit_interval_ms=100, **CONSUMER
    )
    seen: list[tuple[bytes, bytes, list[tuple[str, bytes]]]] = []
    try:
        deadline = time.monotonic() + 20
        while len(seen) < 60 and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                seen.extend((r.key, r.value, list(r.headers)) for r in records)
        assert len(seen) == 60
        assert {value for _, value, _ in seen} == {b"m%d" % i for i in range(60)}
        assert all(headers == [("n", value[1:])] for _, value, headers in seen)
        wait_until(
            lambda: (consumer.poll(50), store.lag("kp%2Eg1", "kp%2Egroup"))[1] == {0: 0, 1: 0, 2: 0},
            10,
            "auto-commit to reach the end",
        )
    finally:
        consumer.close()
    assert sum(store.committed_offsets("kp%2Eg1", "kp%2Egroup").values()) == 60


class _Member(threading.Thread):
    """One group member polling on its own thread, as an application's consumer does.

    Two members polled in turn from one thread livelock in kafka-python 3.0: a poll that times out
    while its JoinGroup is parked (the coordinator waits for the other member) leaves the join
    task running; if that task finishes before the next poll, ``join_group_async`` sees it done
    and sends a fresh JoinGroup, which starts another rebalance for the other member."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self._servers = bootstrap
        self._stop_polling = threading.Event()
        self.assigned: frozenset[int] = frozenset()
        self.error: BaseException | None = None

    def run(self) -> None:
        consumer = KafkaConsumer(
            "kp-rebalance", bootstrap_servers=self._servers, group_id="kp-rb", **CONSUMER
        )
        try:
            while not self._stop_polling.is_set():
                consumer.poll(300)
                self.assigned = frozenset(tp.partition for tp in consumer.assignment())
        except BaseException as exc:  # the test thread reports it
            self.error = exc
        finally:
            consumer.close()

    def leave(self) -> None:
        self._stop_polling.set()
        self.join(30)
        assert not self.is_alive(), "the member did not close"
        assert self.error is None, self.error


def test_two_member_rebalance(bootstrap: str, store: MessageStore, admin: KafkaAdminClient) -> None:
    store.create_topic("kp-rebalance", 3)
    first, second = _Member(bootstrap), _Member(bootstrap)
    try:
        first.start()
        wait_until(lambda: first.assigned == {0, 1, 2}, 20, "first member owns all")
        second.start()

        def split() -> bool:
            a, b = first.assigned, second.assigned
            return bool(a) and bool(b) and a | b == {0, 1, 2} and not a & b

        wait_until(split, 30, "the partitions to be split between both members")

        def stable() -> bool:  # a member's next poll may still be finishing its join
            group = admin.describe_groups(["kp-rb"])["kp-rb"]
            return bool(group["group_state"] == "Stable" and len(group["members"]) == 2)

        wait_until(stable, 30, "the group to be stable with both members")
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["kp-rb"]["protocol_type"] == "consumer"
        assert admin.list_group_offsets({"kp-rb": None}) is not None
        second.leave()
        wait_until(lambda: first.assigned == {0, 1, 2}, 30, "first to take all back")
    finally:
        first.leave()
        if second.is_alive():
            second.leave()


def test_offsets_for_times_and_seek(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("kp-times", 1)
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: record time, not store time
    client = producer(bootstrap)
    for i in range(10):
        client.send("kp-times", value=b"%d" % i, timestamp_ms=base + i * 1000)
    client.flush(10)
    client.close(5)
    tp = TopicPartition("kp-times", 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **CONSUMER)
    try:
        found = consumer.offsets_for_times({tp: base + 5500})[tp]
        assert found is not None
        assert (found.offset, found.timestamp) == (6, base + 6000)
        assert consumer.offsets_for_times({tp: base + 3_600_000 * 2})[tp] is None
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        consumer.assign([tp])
        consumer.seek(tp, found.offset)
        got: list[bytes] = []
        wait_until(
            lambda: got.extend(r.value for rs in consumer.poll(100).values() for r in rs) or len(got) >= 4
        )
        assert got == [b"6", b"7", b"8", b"9"]
    finally:
        consumer.close()


def test_admin_create_and_delete_topics(admin: KafkaAdminClient, store: MessageStore) -> None:
    admin.create_topics([NewTopic("kp-admin", 4, 1), NewTopic("kp-admin-default", -1, -1)])
    admin.create_topics([NewTopic("kp.dotted.name", 2, 1)])
    assert store.queue_count("kp%2Edotted%2Ename") == 2
    assert "kp.dotted.name" in admin.list_topics()
    assert store.queue_count("kp-admin") == 4
    assert store.queue_count("kp-admin-default") == 3  # the store's default queue count
    assert {"kp-admin", "kp-admin-default"} <= set(admin.list_topics())
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("kp-admin", 4, 1)], raise_errors=True)
    admin.delete_topics(["kp-admin"])
    assert not store.has_topic("kp-admin")
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics(["kp-admin"], raise_errors=True)
    assert "SCHEDULE_TOPIC_XXXX" not in admin.list_topics()  # system topics stay hidden


def test_list_groups_lists_offset_groups_not_pop_groups(admin: KafkaAdminClient, store: MessageStore) -> None:
    """ListGroups lists the groups with committed offsets whichever door committed them (HTTP
    pull, Spark), as Kafka lists simple consumer groups; a POP group has no offsets: not listed."""
    store.create_topic("kp-kinds", 1)
    store.put_message(Message(topic="kp-kinds", body=b"one", queue_id=0))
    pop = PopService(store, PopConfig(background=False))
    try:
        assert len(pop.receive("kp-pop", "kp-kinds", invisible_ms=60_000)) == 1
        commit_offsets(store, "kp-offsets", "kp-kinds", {0: 1})  # what PUT /groups/{g}/offsets does
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed["kp-offsets"]["protocol_type"] == ""
        assert "kp-pop" not in listed
    finally:
        pop.close()
