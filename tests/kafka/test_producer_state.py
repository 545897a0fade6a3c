"""Idempotent producer: per-partition sequence verdicts (the id counter: test_txn_record.py)."""

from __future__ import annotations

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.producer_state import (
    MAX_CACHED_BATCHES,
    BatchMetadata,
    ProducerStateTable,
    next_sequence,
)
from ingest_api.kafka.records import MAX_SEQUENCE

KEY = (7, "t", 0)


def test_sequence_verdicts() -> None:
    table = ProducerStateTable()
    assert table.check(KEY, 0, 0, 4).should_append
    table.record(KEY, 0, BatchMetadata(0, 4, 100))
    assert table.check(KEY, 0, 5, 9).should_append
    table.record(KEY, 0, BatchMetadata(5, 9, 105))
    duplicate = table.check(KEY, 0, 0, 4)
    assert duplicate.error == ErrorCode.NONE
    assert duplicate.duplicate_of == 100
    assert table.check(KEY, 0, 11, 12).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert table.check(KEY, 1, 3, 4).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # new epoch must restart
    assert table.check(KEY, 1, 0, 0).should_append
    table.record(KEY, 1, BatchMetadata(0, 0, 200))
    assert table.check(KEY, 0, 10, 10).error == ErrorCode.INVALID_PRODUCER_EPOCH


def test_only_the_last_five_batches_are_remembered() -> None:
    table = ProducerStateTable()
    for i in range(MAX_CACHED_BATCHES + 1):
        table.record(KEY, 0, BatchMetadata(i, i, 1000 + i))
    assert table.check(KEY, 0, 1, 1).duplicate_of == 1001
    assert table.check(KEY, 0, 0, 0).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequences_wrap_and_topics_can_be_forgotten() -> None:
    assert next_sequence(MAX_SEQUENCE) == 0
    table = ProducerStateTable()
    table.record(KEY, 0, BatchMetadata(MAX_SEQUENCE - 1, MAX_SEQUENCE, 1))
    assert table.check(KEY, 0, 0, 3).should_append
    table.forget_topic("t")
    assert table.check(KEY, 0, 77, 80).should_append  # unknown again: accepted at any sequence


def test_store_check_until_a_fresh_write() -> None:
    table = ProducerStateTable()
    assert table.needs_store_check(KEY, 0)  # nothing known (e.g. after a restart)
    table.record(KEY, 0, BatchMetadata(0, 4, 100), fresh=False)  # a retry found in the store
    assert table.needs_store_check(KEY, 0)
    table.record(KEY, 0, BatchMetadata(5, 9, 105), fresh=True)  # written new in this process
    assert not table.needs_store_check(KEY, 0)
    assert table.needs_store_check(KEY, 1)  # a new epoch starts over


def test_a_new_leader_epoch_forgets_what_an_earlier_one_saw() -> None:
    from ingest_api.kafka.producer_state import BatchMetadata, ProducerStateTable

    table = ProducerStateTable()
    key = (7, "t", 0)
    table.follow_leader_epoch(3)
    table.record(key, 0, BatchMetadata(first_seq=0, last_seq=9, base_offset=0))
    assert table.check(key, 0, 500, 509).error.name == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    table.follow_leader_epoch(3)  # the same epoch: kept
    assert not table.needs_store_check(key, 0)
    table.follow_leader_epoch(5)  # led again after another master: checked against the store
    assert table.check(key, 0, 500, 509).error.name == "NONE"
    assert table.needs_store_check(key, 0)


def test_a_refused_batch_makes_the_partition_look_in_the_store_again() -> None:
    """An append that raised may have stored its batch (an acknowledgement that timed out): the
    retry, next in sequence, must be looked up, not written again."""
    from ingest_api.kafka.producer_state import BatchMetadata, ProducerStateTable

    table = ProducerStateTable()
    key = (7, "t", 0)
    table.record(key, 0, BatchMetadata(first_seq=0, last_seq=9, base_offset=0), fresh=True)
    assert not table.needs_store_check(key, 0)
    table.doubt(key, 1)  # another epoch: nothing to doubt
    assert not table.needs_store_check(key, 0)
    table.doubt(key, 0)
    assert table.check(key, 0, 10, 19).error.name == "NONE" and table.needs_store_check(key, 0)
    table.record(key, 0, BatchMetadata(first_seq=10, last_seq=19, base_offset=10), fresh=False)  # found
    assert table.needs_store_check(key, 0), "still doubtful: that batch was found, not written"
    table.record(key, 0, BatchMetadata(first_seq=20, last_seq=29, base_offset=20), fresh=True)
    assert not table.needs_store_check(key, 0)
    table.doubt((8, "t", 0), 0)  # an unknown producer: nothing to do


def test_a_batch_stored_unacknowledged_takes_its_sequences_and_its_retry_goes_to_the_store() -> None:
    """Kafka puts a batch's sequences in the producer state once it is in the log: the batches
    in flight behind it are in order (not OUT_OF_ORDER_SEQUENCE_NUMBER, after which librdkafka
    renumbers the refused batch under a new epoch and it is stored twice), and its retry is not
    answered from the table, which would acknowledge it before the replicas hold it."""
    table = ProducerStateTable()
    table.record(KEY, 0, BatchMetadata(0, 4, 100), fresh=True)
    table.stored_unacknowledged(KEY, 0, 5, 9)
    behind = table.check(KEY, 0, 10, 14)
    assert behind.should_append and not behind.in_store
    assert table.needs_store_check(KEY, 0)
    table.record(KEY, 0, BatchMetadata(10, 14, 110), fresh=True)
    retry = table.check(KEY, 0, 5, 9)
    assert retry.should_append and retry.in_store, "the store's dedupe must answer the retry"
    table.record(KEY, 0, BatchMetadata(5, 9, 105), fresh=False)  # found there, now acknowledged
    assert table.check(KEY, 0, 5, 9).duplicate_of == 105
    assert table.check(KEY, 0, 15, 19).should_append, "the acknowledged retry kept its place"
    assert table.check(KEY, 0, 11, 19).error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
