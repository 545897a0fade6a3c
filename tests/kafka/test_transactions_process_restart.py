"""A Kafka transaction across a ``kill -9`` of the gateway *process* (confluent-kafka, a real
``python -m ingest_api.kafka`` process): the coordinator's state is records of
``rmq_sys_KAFKA_TXN_STATE``, replayed at the restart, so the same producer commits its open
transaction; a second producer of the same transactional id fences the first, and that fence
also outlives a ``kill -9``. No side file is written."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from tests.kafka.test_confluent import FAST, consumer, poll_values
from tests.kafka.test_transactions_kill import Processes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TID = "restart-tx"


def _producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": TID, "linger.ms": 5, **FAST})


def _committed(bootstrap: str, want: int) -> list[bytes]:
    reader = consumer(bootstrap, **{"group.id": "restart-reader", "isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition("out", 0, 0)])
        return [m.value() for m in poll_values(reader, want, timeout_s=15)]
    finally:
        reader.close()


def _restart(processes: Processes) -> None:
    processes.kill("gateway")
    processes.start_gateway()


def test_the_same_producer_commits_after_kill_9_and_a_fence_outlives_one(processes: Processes) -> None:
    bootstrap = processes.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("out", 1, 1)])["out"].result(15)
    first = _producer(bootstrap)
    first.init_transactions(20)
    first.begin_transaction()
    first.produce("out", value=b"a", partition=0)
    first.produce("out", value=b"b", partition=0)
    assert first.flush(20) == 0
    _restart(processes)
    first.commit_transaction(30)
    assert _committed(bootstrap, 2) == [b"a", b"b"]

    first.begin_transaction()
    first.produce("out", value=b"zombie", partition=0)
    assert first.flush(20) == 0
    second = _producer(bootstrap)
    second.init_transactions(20)  # aborts the first's open transaction, bumps the epoch
    _restart(processes)
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(10)  # still fenced after the restart
    assert fenced.value.args[0].fatal(), fenced.value
    second.begin_transaction()
    second.produce("out", value=b"c", partition=0)
    second.commit_transaction(30)
    assert _committed(bootstrap, 3) == [b"a", b"b", b"c"]
    config_dir = processes.tmp_path / "store" / "config"
    assert not list(config_dir.glob("kafka*.json"))  # the state is in the log only
