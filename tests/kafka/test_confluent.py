"""Black-box scenarios with confluent-kafka (librdkafka), the stricter of the two clients."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from store import MessageStore
from tests.kafka.test_kafka_python import stored_values
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

FAST: dict[str, Any] = {
    "socket.timeout.ms": 5000,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 200,
}


def consumer(bootstrap: str, **config: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
            **FAST,
            **config,
        }
    )


def poll_values(client: Consumer, want: int, timeout_s: float = 20) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        message = client.poll(0.2)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            continue
        got.append(message)
    return got


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_flush_every_compression_and_acks(
    bootstrap: str, store: MessageStore, compression: str, acks: str
) -> None:
    topic = f"ck-{compression}-{acks}"
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 2,
            **FAST,
        }
    )
    errors: list[Any] = []
    sent = [b"payload-%03d " % i * 8 for i in range(40)]
    for i, value in enumerate(sent):
        producer.produce(
            topic, value=value, key=b"k%d" % i, on_delivery=lambda err, _: err and errors.append(err)
        )
    assert producer.flush(10) == 0
    assert errors == []
    wait_until(lambda: len(stored_values(store, topic)) == len(sent), 10, "every record stored")
    assert sorted(stored_values(store, topic)) == sorted(sent)


def test_group_consumer_with_auto_commit(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck%2Egroup", 3)  # Kafka "ck.group"
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **FAST})
    for i in range(60):
        producer.produce("ck.group", value=b"m%d" % i, key=b"key-%d" % i, headers=[("n", b"%d" % i)])
    assert producer.flush(10) == 0
    client = consumer(bootstrap, **{"group.id": "ck.g1", "auto.commit.interval.ms": 100})
    try:
        client.subscribe(["ck.group"])
        got = poll_values(client, 60)
        assert sorted(m.value() for m in got) == sorted(b"m%d" % i for i in range(60))
        assert all(m.headers() == [("n", m.value()[1:])] for m in got)
        assert all(m.key() == b"key-" + m.value()[1:] for m in got)
        wait_until(
            lambda: (client.poll(0.05), store.lag("ck%2Eg1", "ck%2Egroup"))[1] == {0: 0, 1: 0, 2: 0},
            10,
            "auto-commit to reach the end",
        )
    finally:
        client.close()


def test_two_member_rebalance(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck-rebalance", 3)
    assigned: dict[str, set[int]] = {"a": set(), "b": set()}

    def tracker(name: str) -> dict[str, Any]:
        def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
            assigned[name] = {p.partition for p in partitions}

        def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
            assigned[name] = set()

        return {"on_assign": on_assign, "on_revoke": on_revoke}

    first = consumer(bootstrap, **{"group.id": "ck-rb"})
    second = consumer(bootstrap, **{"group.id": "ck-rb"})
    try:
        first.subscribe(["ck-rebalance"], **tracker("a"))
        wait_until(lambda: (first.poll(0.05), assigned["a"])[1] == {0, 1, 2}, 20, "first member owns all")
        second.subscribe(["ck-rebalance"], **tracker("b"))

        def split() -> bool:
            first.poll(0.05)
            second.poll(0.05)
            a, b = assigned["a"], assigned["b"]
            return bool(a) and bool(b) and a | b == {0, 1, 2} and not a & b

        wait_until(split, 30, "the partitions to be split between both members")
        second.close()
        wait_until(lambda: (first.poll(0.05), assigned["a"])[1] == {0, 1, 2}, 30, "first to take all back")
    finally:
        first.close()


def test_offsets_for_times_and_seek(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck-times", 1)
    base = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": bootstrap, **FAST})
    for i in range(10):
        producer.produce("ck-times", value=b"%d" % i, timestamp=base + i * 1000)
    assert producer.flush(10) == 0
    client = consumer(bootstrap, **{"group.id": "ck-times-reader", "enable.auto.commit": False})
    try:
        (found,) = client.offsets_for_times([TopicPartition("ck-times", 0, base + 5500)], timeout=10)
        assert found.offset == 6
        (missing,) = client.offsets_for_times([TopicPartition("ck-times", 0, base + 7_200_000)], timeout=10)
        assert missing.offset == -1
        assert client.get_watermark_offsets(TopicPartition("ck-times", 0), timeout=10) == (0, 10)
        client.assign([TopicPartition("ck-times", 0, found.offset)])
        got = poll_values(client, 4)
        assert [m.value() for m in got] == [b"6", b"7", b"8", b"9"]
        assert [m.timestamp()[1] for m in got] == [base + i * 1000 for i in range(6, 10)]
        client.commit(asynchronous=False)  # a simple consumer commits with generation -1
        assert store.committed_offsets("ck-times-reader", "ck-times") == {0: 10}
    finally:
        client.close()


def test_admin_create_and_delete_topics(bootstrap: str, store: MessageStore) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST})
    futures = admin.create_topics([NewTopic("ck-admin", 5, 1)], operation_timeout=5)
    futures["ck-admin"].result(10)
    assert store.queue_count("ck-admin") == 5
    again = admin.create_topics([NewTopic("ck-admin", 5, 1)])["ck-admin"]
    with pytest.raises(KafkaException) as err:
        again.result(10)
    assert err.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    admin.delete_topics(["ck-admin"])["ck-admin"].result(10)
    assert not store.has_topic("ck-admin")
    assert "ck-admin" not in admin.list_topics(timeout=10).topics


def test_awkward_keys_headers_and_tombstones_round_trip_exactly(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck-exact", 1)
    sent: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (b"plain", b"v1", [("a", b"1"), ("b", b"2")]),
        (b"\xff\xfe binary", b"v2", [("dup", b"1"), ("dup", b"2"), ("bin", b"\x00\xff"), ("null", None)]),
        (b"", None, [("TAGS", b"not-a-tag"), ("empty", b"")]),  # empty key, tombstone
        (None, b"", []),
        (b" lead  and trail ", b"v5", [("\u00e9t\u00e9", "\u2603".encode())]),
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, **FAST})
    for key, value, headers in sent:
        producer.produce("ck-exact", key=key, value=value, headers=headers, partition=0)
    assert producer.flush(10) == 0
    client = consumer(bootstrap, **{"group.id": "ck-exact-reader"})
    try:
        client.subscribe(["ck-exact"])
        got = poll_values(client, len(sent))
        assert [(m.key(), m.value(), m.headers() or []) for m in got] == sent
    finally:
        client.close()


def test_an_idempotent_retry_is_acknowledged_only_once_replicated(
    bootstrap: str, store: MessageStore
) -> None:
    """A batch stored whose acknowledgement timed out (FLUSH_SLAVE_TIMEOUT: the slaves lag) is
    retried by librdkafka with the same sequence. The retry finds it in the store (the
    producer's first batch is checked there), and is answered only once the in-sync replicas
    hold it: its own acknowledgement times out too here, so only a third attempt is answered.
    Never acknowledged sooner, stored once."""
    from tests.support.replication_faults import AckTimesOut

    store.create_topic("acked-once", 1)
    store.create_topic("acked-warm", 1)
    hooks = AckTimesOut()
    store._appender.replication = hooks  # the hook a replicated store installs (store.ha.gate)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **FAST})
    try:
        producer.produce("acked-warm", value=b"warm", partition=0)  # the producer id, before the faults
        assert producer.flush(10) == 0
        hooks.armed = 2
        producer.produce("acked-once", value=b"m-0", partition=0)  # one batch
        assert producer.flush(20) == 0
        assert hooks.timed_out == 2, "the retry was answered without waiting for the replicas"
    finally:
        store._appender.replication = None
    assert stored_values(store, "acked-once") == [b"m-0"]


def test_a_retry_of_a_later_batch_stored_unacknowledged_is_stored_once(
    bootstrap: str, store: MessageStore
) -> None:
    """The Jepsen run's output twice (docs/replication.md): once a producer's batches of a
    partition had been written new, the next ones skipped the store lookup; a batch stored
    whose acknowledgement timed out was not recorded, so its retry, next in sequence, was
    written again. A failed append now makes the partition's next batches look in the store."""
    from tests.support.replication_faults import AckTimesOut

    store.create_topic("acked-later", 1)
    hooks = AckTimesOut()
    store._appender.replication = hooks  # the hook a replicated store installs (store.ha.gate)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **FAST})
    try:
        for i in range(2):  # written new: the partition's batches are no longer looked up
            producer.produce("acked-later", value=b"m-%d" % i, partition=0)
            assert producer.flush(10) == 0
        hooks.armed = 1
        producer.produce("acked-later", value=b"m-2", partition=0)  # stored, not acknowledged
        assert producer.flush(20) == 0
        assert hooks.timed_out == 1
        producer.produce("acked-later", value=b"m-3", partition=0)  # written new again
        assert producer.flush(10) == 0
    finally:
        store._appender.replication = None
    assert stored_values(store, "acked-later") == [b"m-0", b"m-1", b"m-2", b"m-3"]


def test_batches_in_flight_behind_one_stored_unacknowledged_are_each_stored_once(
    bootstrap: str, store: MessageStore
) -> None:
    """The Jepsen run's messages twice under a full master disk (docs/replication.md): a batch
    stored whose acknowledgement failed (here the replicas' ack timed out; there the fsync)
    was not recorded in the partition's sequences, so the batches librdkafka had in flight
    behind it were answered OUT_OF_ORDER_SEQUENCE_NUMBER. librdkafka then bumps the producer
    epoch and numbers every unsent message again, the refused batch's retry included, under
    new UNIQ_KEYs: stored a second time. Kafka records a batch's sequence once it is in the
    log, acknowledged or not; so does the gateway now, and the batches behind it are taken."""
    from tests.support.replication_faults import AckTimesOut

    store.create_topic("in-flight", 1)
    hooks = AckTimesOut()
    store._appender.replication = hooks  # the hook a replicated store installs (store.ha.gate)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 1,  # one message per batch: several batches in flight
            **FAST,
        }
    )
    sent = [b"f-%d" % i for i in range(200)]
    delivered: list[bytes] = []
    try:
        producer.produce("in-flight", value=b"warm", partition=0)  # the producer id, before the fault
        assert producer.flush(10) == 0
        hooks.armed = 1
        for value in sent:
            producer.produce(
                "in-flight",
                value=value,
                partition=0,
                on_delivery=lambda err, msg: err is None and delivered.append(msg.value()),
            )
        assert producer.flush(30) == 0
        assert hooks.timed_out == 1
    finally:
        store._appender.replication = None
    assert sorted(delivered) == sorted(sent)
    assert stored_values(store, "in-flight") == [b"warm", *sent]
