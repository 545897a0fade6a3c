"""A consume-transform-produce loop with confluent-kafka, as an exactly-once application writes
it: read topic A (``read_committed``), write ``b:<value>`` to topic B in a transaction that also
carries the consumed offsets, commit; on an abortable error abort and rewind to the committed
offsets; on a fatal one exit (the supervisor restarts it, and ``init_transactions`` fences the
old epoch). Exits 0 once the group's committed offsets reach the end of A.

Run by ``test_transactions_kill.py``::

    python -m tests.kafka.ctp_loop BOOTSTRAP PARTITIONS BATCH
"""

from __future__ import annotations

import os
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition

SOURCE, SINK, GROUP, TRANSACTIONAL_ID = "ctp-a", "ctp-b", "ctp", "ctp-loop"
RETRY = {"socket.timeout.ms": 3000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}
#: A single broker that restarts is "all brokers down": librdkafka (>= 2.10) then re-bootstraps
#: and decommissions it, and send_offsets_to_transaction() waits forever on the stale group
#: coordinator (librdkafka issues #5511, #5456). Not re-bootstrapping avoids it.
SINGLE_BROKER = {"metadata.recovery.strategy": "none"}
#: ``CTP_DEBUG=eos,protocol`` turns on librdkafka's debug log (to stderr).
DEBUG = {"debug": os.environ["CTP_DEBUG"]} if os.environ.get("CTP_DEBUG") else {}


def rewind(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Continue from the committed offsets (what the last committed transaction consumed)."""
    committed = consumer.committed(partitions, timeout=30)
    consumer.assign(
        [
            TopicPartition(SOURCE, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in committed
        ]
    )


def finished(consumer: Consumer, partitions: list[TopicPartition]) -> bool:
    committed = consumer.committed(partitions, timeout=30)
    return all(
        tp.offset >= 0 and tp.offset >= consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in committed
    )


def retried(call: object, *args: object) -> None:
    """Call a transactional API, retrying while librdkafka says the error is retriable."""
    while True:
        try:
            call(*args)  # type: ignore[operator]
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


def main(bootstrap: str, partitions: int, batch: int) -> int:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": TRANSACTIONAL_ID,
            **RETRY,
            **SINGLE_BROKER,
            **DEBUG,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            **RETRY,
            **SINGLE_BROKER,
        }
    )
    parts = [TopicPartition(SOURCE, p) for p in range(partitions)]
    retried(producer.init_transactions, 30)
    rewind(consumer, parts)
    while True:
        records = [m for m in consumer.consume(batch, 0.5) if m.error() is None]
        if not records:
            if finished(consumer, parts):
                return 0
            continue
        try:
            producer.begin_transaction()
            for record in records:
                producer.produce(SINK, value=b"b:" + record.value(), partition=record.partition())
            positions = consumer.position(consumer.assignment())
            retried(producer.send_offsets_to_transaction, positions, consumer.consumer_group_metadata(), 30)
            retried(producer.commit_transaction, 30)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.txn_requires_abort():
                print(f"fatal: {error}", file=sys.stderr)
                return 3
            retried(producer.abort_transaction, 30)
            rewind(consumer, parts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
