"""A Kafka transaction across a master failover, end to end: real broker processes in a sync
replica group, real ZooKeeper, confluent-kafka. The transaction is begun, produced to and its
partition added; the master is killed with ``kill -9``; the promoted slave replays the
coordinator's state topic (``rmq_sys_KAFKA_TXN_STATE``) and the client commits the same
transaction there (issue 33: the slave used to know nothing of the transactional id, and the
client's commit was refused as INVALID_PRODUCER_ID_MAPPING, fatal). A slave, which cannot put
a producer-id record, answers an idempotent producer with an id of its own half."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from ingest_api.kafka.producer_state import LOCAL_HALF, PRODUCER_ID_BLOCK_BITS
from tests.kafka.rawclient import RawClient
from tests.kafka.test_confluent import FAST, consumer, poll_values
from tests.support.cluster import ProcessCluster
from tests.support.replica_pair import ReplicaPair

pytestmark = [pytest.mark.cluster, pytest.mark.kafka]

TID = "failover-tx"


def _read_committed(bootstrap: str, want: int) -> list[bytes]:
    reader = consumer(bootstrap, **{"group.id": "fo-reader", "isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition("t", 0, 0)])
        return [m.value() for m in poll_values(reader, want, timeout_s=20)]
    finally:
        reader.close()


def _init_producer_id(port: int) -> tuple[int, int]:
    """An idempotent InitProducerId (v4) asked of the gateway on ``port``: (error, producer id).
    A slave cannot put the producer-id record: it answers with an id of its own local half."""
    with RawClient(port) as client:
        answer = client.call(
            InitProducerIdRequest,
            InitProducerIdResponse,
            4,
            transactional_id=None,
            transaction_timeout_ms=1000,
            producer_id=-1,
            producer_epoch=-1,
        )
    return answer.error_code, answer.producer_id


def test_an_open_transaction_commits_on_the_promoted_slave(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1", kafka=True)
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 1}).status_code == 201
        bootstrap = ",".join(f"127.0.0.1:{b.kafka_port}" for b in (pair.master, pair.slave))
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TID, "linger.ms": 5, **FAST})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("t", value=f"open-{i}".encode(), partition=0)
        assert producer.flush(30) == 0  # AddPartitionsToTxn answered, the halves acknowledged

        pair.master.kill()  # kill -9 of the master (and coordinator) with the transaction open
        pair.wait_led_by(pair.slave)
        producer.commit_transaction(60)  # to the promoted slave: the same producer id and epoch

        slave = f"127.0.0.1:{pair.slave.kafka_port}"
        assert _read_committed(slave, 3) == [b"open-0", b"open-1", b"open-2"]
        # The producer goes on under the same epoch: nothing fenced it.
        producer.begin_transaction()
        producer.produce("t", value=b"after", partition=0)
        producer.commit_transaction(30)
        assert _read_committed(slave, 4) == [b"open-0", b"open-1", b"open-2", b"after"]


def test_a_slave_hands_out_producer_ids_of_its_own_half_so_a_producer_bootstrapped_there_produces(
    tmp_path: Path,
) -> None:
    """A slave cannot put the state record, yet answers InitProducerId as every Kafka broker
    does: with an id of the upper half of its own block, from its local counter (librdkafka's
    sparse connections ask nobody but its bootstrap broker). The master's ids are recorded ones,
    of its lower half: the two never meet."""
    with ProcessCluster.started(tmp_path, []) as cluster:
        pair = ReplicaPair.started(cluster, "b1", kafka=True)
        with cluster.http("b1-a") as http:
            assert http.put("/topics/t", json={"queues": 1}).status_code == 201
        assert pair.slave.kafka_port is not None and pair.master.kafka_port is not None
        error, local_id = _init_producer_id(pair.slave.kafka_port)
        again_error, again_id = _init_producer_id(pair.slave.kafka_port)
        assert (error, again_error) == (0, 0) and again_id == local_id + 1
        assert local_id % (1 << PRODUCER_ID_BLOCK_BITS) >= LOCAL_HALF  # the slave's own half
        error, recorded_id = _init_producer_id(pair.master.kafka_port)
        assert error == 0 and recorded_id % (1 << PRODUCER_ID_BLOCK_BITS) < LOCAL_HALF
        slave = f"127.0.0.1:{pair.slave.kafka_port}"
        producer = Producer({"bootstrap.servers": slave, "enable.idempotence": True, **FAST})
        producer.produce("t", value=b"once", partition=0)
        assert producer.flush(30) == 0
        assert _read_committed(slave, 1) == [b"once"]
