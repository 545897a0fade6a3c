"""Kafka transactions with confluent-kafka (librdkafka): commit and abort across topics and
partitions, offsets sent to the transaction, read_committed and read_uncommitted consumers, a
second producer fencing the first, and the broker's transaction timeout."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ingest_api.kafka import GatewayThread
from ingest_api.kafka.txn_log import TxnStateLog
from ingest_api.kafka.txn_reload import catch_up_promotion
from store import TRANS_HALF_TOPIC, MessageStore
from store.publish import TransactionService
from tests.kafka.test_confluent import FAST, consumer, poll_values
from tests.support.replication_faults import AckTimesOut
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka


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


def read_all(
    bootstrap: str, topics: dict[str, int], isolation: str, want: int
) -> list[tuple[str, int, bytes]]:
    reader = consumer(bootstrap, **{"group.id": f"reader-{isolation}", "isolation.level": isolation})
    try:
        reader.assign([TopicPartition(t, p, 0) for t, count in topics.items() for p in range(count)])
        got = poll_values(reader, want, timeout_s=15)
        assert [m for m in (reader.poll(0.2) for _ in range(5)) if m is not None and not m.error()] == []
        return sorted((m.topic(), m.partition(), m.value()) for m in got)
    finally:
        reader.close()


def test_commit_then_abort_with_offsets_and_committed_readers(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck-in", 2)
    store.create_topic("ck-out-a", 3)
    store.create_topic("ck-out-b", 2)
    feeder = Producer({"bootstrap.servers": bootstrap, **FAST})
    for i in range(20):
        feeder.produce("ck-in", value=b"in-%d" % i, partition=i % 2)
    assert feeder.flush(10) == 0

    source = consumer(bootstrap, **{"group.id": "ck-ctp", "enable.auto.commit": False})
    producer = tx_producer(bootstrap, "ck-tx")
    try:
        source.subscribe(["ck-in"])
        first = poll_values(source, 10)
        producer.init_transactions(10)
        # Round 1: several topics and partitions, offsets of what was read, commit.
        producer.begin_transaction()
        for m in first:
            value = m.value()
            producer.produce("ck-out-a", value=b"A:" + value, partition=int(value[3:]) % 3)
            producer.produce("ck-out-b", value=b"B:" + value, partition=int(value[3:]) % 2)
        committed_positions = source.position(source.assignment())
        producer.send_offsets_to_transaction(committed_positions, source.consumer_group_metadata(), 10)
        assert store.committed_offsets("ck-ctp", "ck-in") == {}  # not before the commit
        producer.commit_transaction(10)
        expected_offsets = {tp.partition: tp.offset for tp in committed_positions if tp.offset >= 0}
        assert sum(expected_offsets.values()) == 10
        assert store.committed_offsets("ck-ctp", "ck-in") == expected_offsets

        # Round 2: the rest, its offsets, then abort.
        second = poll_values(source, 10)
        producer.begin_transaction()
        for m in second:
            producer.produce("ck-out-a", value=b"A:" + m.value(), partition=0)
        producer.send_offsets_to_transaction(
            source.position(source.assignment()), source.consumer_group_metadata(), 10
        )
        producer.abort_transaction(10)
        assert store.committed_offsets("ck-ctp", "ck-in") == expected_offsets
        committed = source.committed([TopicPartition("ck-in", p) for p in range(2)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed if tp.offset >= 0} == expected_offsets
    finally:
        source.close()

    values = sorted(m.value() for m in first)
    want = sorted(
        [("ck-out-a", int(v[3:]) % 3, b"A:" + v) for v in values]
        + [("ck-out-b", int(v[3:]) % 2, b"B:" + v) for v in values]
    )
    topics = {"ck-out-a": 3, "ck-out-b": 2}
    assert read_all(bootstrap, topics, "read_committed", len(want)) == want
    assert read_all(bootstrap, topics, "read_uncommitted", len(want)) == want  # finals are plain records


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    bootstrap: str, store: MessageStore
) -> None:
    store.create_topic("ck-fence", 1)
    first = tx_producer(bootstrap, "ck-fenced")
    first.init_transactions(10)
    first.begin_transaction()
    first.produce("ck-fence", value=b"zombie", partition=0)
    assert first.flush(10) == 0
    second = tx_producer(bootstrap, "ck-fenced")
    second.init_transactions(10)  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce("ck-fence", value=b"winner", partition=0)
    second.commit_transaction(10)
    with pytest.raises(KafkaException) as err:
        first.commit_transaction(10)
    assert err.value.args[0].code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    )
    assert err.value.args[0].fatal()
    assert read_all(bootstrap, {"ck-fence": 1}, "read_committed", 1) == [("ck-fence", 0, b"winner")]


def test_the_broker_aborts_a_transaction_past_its_timeout(bootstrap: str, store: MessageStore) -> None:
    store.create_topic("ck-slow", 1)
    producer = tx_producer(
        bootstrap, "ck-slow", **{"transaction.timeout.ms": 1000, "socket.timeout.ms": 1000}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("ck-slow", value=b"too late", partition=0)
    assert producer.flush(10) == 0
    wait_until(
        lambda: TxnStateLog(store).load().transactional_ids["ck-slow"].epoch == 1,
        15,
        "a fence (its record in the state topic)",
    )
    assert store.max_offset("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0) == 1  # the broker's abort
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
    assert store.max_offset("ck-slow", 0) == 0
    reader: Consumer = consumer(
        bootstrap, **{"group.id": "ck-slow-reader", "isolation.level": "read_committed"}
    )
    try:
        reader.assign([TopicPartition("ck-slow", 0, 0)])
        assert poll_values(reader, 1, timeout_s=2) == []
    finally:
        reader.close()


def test_a_retried_produce_whose_first_attempt_was_stored_unacknowledged_is_committed(
    bootstrap: str, store: MessageStore
) -> None:
    """The Jepsen run's lost commit (docs/replication.md): a transactional batch stored by its
    first attempt, whose acknowledgement timed out, was found in the store on the retry and
    answered without joining its transaction, so the commit found no halves and wrote nothing.
    The retry now goes through the store's dedupe (acknowledged once replicated) and registers."""
    store.create_topic("ck-acked", 1)
    hooks = AckTimesOut()
    store._appender.replication = hooks  # the hook a replicated store installs (store.ha.gate)
    producer = tx_producer(bootstrap, "ck-acked-tx")
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        hooks.armed = 1  # the batch's first append: stored, not acknowledged
        for i in range(5):
            producer.produce("ck-acked", value=b"v-%d" % i, partition=0)
        assert producer.flush(10) == 0
        assert hooks.timed_out == 1, "the first attempt was not refused after storing"
        producer.commit_transaction(10)
    finally:
        store._appender.replication = None
    want = [("ck-acked", 0, b"v-%d" % i) for i in range(5)]
    assert read_all(bootstrap, {"ck-acked": 1}, "read_committed", len(want)) == want


def test_a_retried_later_batch_of_a_transaction_is_committed_once(
    bootstrap: str, store: MessageStore
) -> None:
    """As above, for a batch after others of the same partition (the Jepsen run's 45 outputs
    twice): once the partition's batches had been written new they skipped the store lookup,
    and a batch stored unacknowledged was not recorded, so its retry, next in sequence, was
    stored as halves a second time."""
    store.create_topic("ck-later", 1)
    hooks = AckTimesOut()
    store._appender.replication = hooks
    producer = tx_producer(bootstrap, "ck-later-tx")
    try:
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(2):
            producer.produce("ck-later", value=b"v-%d" % i, partition=0)
            assert producer.flush(10) == 0
        hooks.armed = 1  # the third batch: stored, not acknowledged
        producer.produce("ck-later", value=b"v-2", partition=0)
        assert producer.flush(20) == 0
        assert hooks.timed_out == 1, "the batch was not refused after storing"
        # What a promoted member rebuilds from the log (broker.membership): the batch's halves
        # once. A second copy, never registered, was a half of the transaction all the same,
        # and its commit on the new master wrote that batch twice.
        (pending,) = TransactionService.open(store).pending()
        assert len(pending.half_queue_offsets) == 3
        producer.commit_transaction(10)
    finally:
        store._appender.replication = None
    want = [("ck-later", 0, b"v-%d" % i) for i in range(3)]
    assert read_all(bootstrap, {"ck-later": 1}, "read_committed", len(want)) == want
    assert store.queue_offsets(TRANS_HALF_TOPIC) == {0: (0, 3)}, "halves stored once"


def test_a_promotion_in_progress_holds_transactions_until_the_state_is_replayed(
    gateway: GatewayThread, store: MessageStore
) -> None:
    """While a promoted member replays the coordinator's state (``txn_loading``, set before its
    store takes writes), a transactional Produce is refused retriably and stores nothing: served
    from the slave's stale coordinator it was given a transaction id already used. librdkafka
    retries, and the transaction commits once the replay is done."""
    store.create_topic("ck-loading", 1)
    context = gateway.gateway.context  # type: ignore[union-attr]
    producer = tx_producer(gateway.bootstrap, "ck-loading-tx")
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("ck-loading", value=b"v-0", partition=0)  # the partition joins the transaction
    assert producer.flush(10) == 0
    assert store.queue_offsets(TRANS_HALF_TOPIC) == {0: (0, 1)}
    context.txn_loading = True  # as on_lead_begin sets it; the client sends Produce only
    try:
        for i in range(1, 5):
            producer.produce("ck-loading", value=b"v-%d" % i, partition=0)
        producer.poll(1.5)
        assert store.queue_offsets(TRANS_HALF_TOPIC) == {0: (0, 1)}, "stored while replaying"
    finally:
        context.txn_loading = False
    assert producer.flush(20) == 0
    producer.commit_transaction(20)
    want = [("ck-loading", 0, b"v-%d" % i) for i in range(5)]
    assert read_all(gateway.bootstrap, {"ck-loading": 1}, "read_committed", len(want)) == want


def test_a_lead_begun_while_the_gateway_started_is_caught_up(
    gateway: GatewayThread, store: MessageStore
) -> None:
    """A replica group founded during the broker's start-up: its first lead retired the
    transaction service the gateway had taken, and rebuilt another, before the gateway's
    promotion listeners were attached. The gateway catches up once they are
    (``catch_up_promotion``); it used to refuse every transactional Produce for the whole epoch
    (the all-faults Jepsen run: 228 refusals, ``the transaction table is being rebuilt``)."""
    store.create_topic("ck-founded", 1)
    context = gateway.gateway.context  # type: ignore[union-attr]
    context.transactions.retire("this member is becoming its group's master")  # on_lead_begin
    rebuilt = TransactionService.open(store)  # on_lead: the broker's rebuild
    caught_up = asyncio.run_coroutine_threadsafe(catch_up_promotion(context, rebuilt), context.loop)
    assert caught_up.result(30) and context.transactions is rebuilt
    again = asyncio.run_coroutine_threadsafe(catch_up_promotion(context, rebuilt), context.loop)
    assert not again.result(30), "nothing to catch up once done"
    producer = tx_producer(gateway.bootstrap, "ck-founded-tx")
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(3):
        producer.produce("ck-founded", value=b"v-%d" % i, partition=0)
    assert producer.flush(10) == 0
    producer.commit_transaction(10)
    want = [("ck-founded", 0, b"v-%d" % i) for i in range(3)]
    assert read_all(gateway.bootstrap, {"ck-founded": 1}, "read_committed", len(want)) == want
