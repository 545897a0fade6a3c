"""A Kafka consume-transform-produce loop with transactions in the Jepsen run
(tests/cluster/jepsen.py), and its exactly-once checker.

* **Workload** (:class:`KafkaTransformer`): confluent-kafka, as an exactly-once application
  writes it (tests/kafka/ctp_loop.py): read the run's topic ``read_committed``, write
  ``t:<value>`` to :data:`OUT` (same partition) in a transaction that also carries the consumed
  offsets of :data:`GROUP`, commit; on an abortable error abort and rewind to the committed
  offsets; on a fatal one (fenced, or an unknown outcome) start a new producer, whose
  ``init_transactions`` ends the old epoch, and rewind. It runs through every fault.
* **Checker** (:func:`check`), on the final master after the heal: the group's committed
  offset ``C[q]`` of each queue and the ``read_committed`` output must agree exactly: every input
  below ``C[q]`` is in the output once, nothing is there twice, and nothing is there whose input
  is at or past ``C[q]`` (output committed without its offsets, or offsets without output,
  would break one of the three).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.cluster.jepsen_commits import group_offsets, kafka_servers, queue_bodies

OUT = "jepsen-out"
GROUP = "jepsen-eos"
TRANSACTIONAL_ID = "jepsen-eos-loop"
PREFIX = "t:"
BATCH = 100
#: Long enough for an election (a paused master: its session, 6 s, and more).
CALL_TIMEOUT_S = 30.0


class KafkaTransformer(threading.Thread):
    """The loop (module docstring); counts committed and aborted transactions."""

    def __init__(self, servers: str, topic: str, queues: int, stop: threading.Event) -> None:
        super().__init__(name="jepsen-kafka-eos", daemon=True)
        self.servers, self.topic, self.queues, self.stop = servers, topic, queues, stop
        self.committed = self.aborted = self.restarted = 0
        self.errors: list[str] = []
        #: Every transaction tried: (monotonic start, input values, outcome), the outcome being
        #: ``commit``, ``abort`` or ``restart`` (a new producer: the outcome is the log's).
        self.tried: list[tuple[float, list[str], str]] = []

    def _config(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.servers,
            "socket.timeout.ms": 5000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        }

    def run(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        consumer = Consumer(
            {
                **self._config(),
                "group.id": GROUP,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
            }
        )
        producer = self._producer()
        try:
            self._rewind(consumer)
            while not self.stop.is_set():
                records = [m for m in consumer.consume(BATCH, 0.5) if m.error() is None]
                if not records:
                    continue
                began, values = time.monotonic(), [(m.value() or b"").decode() for m in records]
                try:
                    self._transaction(producer, consumer, records)
                    self.committed += 1
                    self.tried.append((began, values, "commit"))
                except KafkaException as exc:
                    restarts = self.restarted
                    producer = self._recover(producer, exc)
                    self.tried.append((began, values, "restart" if self.restarted > restarts else "abort"))
                    self._rewind(consumer)
        except Exception as exc:  # the checker then finds whatever this left behind
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            consumer.close()

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer({**self._config(), "transactional.id": TRANSACTIONAL_ID})
        self._retried(producer.init_transactions, CALL_TIMEOUT_S)
        return producer

    def _transaction(self, producer: Any, consumer: Any, records: list[Any]) -> None:
        producer.begin_transaction()
        for record in records:
            producer.produce(OUT, value=PREFIX.encode() + record.value(), partition=record.partition())
        positions = consumer.position(consumer.assignment())
        metadata = consumer.consumer_group_metadata()
        self._retried(producer.send_offsets_to_transaction, positions, metadata, CALL_TIMEOUT_S)
        self._retried(producer.commit_transaction, CALL_TIMEOUT_S)

    def _recover(self, producer: Any, exc: Exception) -> Any:
        """Abort when the error allows it, else a new producer (fencing the old epoch)."""
        from confluent_kafka import KafkaException

        error = exc.args[0]
        if error.txn_requires_abort():
            try:
                self._retried(producer.abort_transaction, CALL_TIMEOUT_S)
                self.aborted += 1
                return producer
            except KafkaException:
                pass
        self.restarted += 1
        producer.flush(0)
        return self._producer()

    def _rewind(self, consumer: Any) -> None:
        """Continue from the group's committed offsets (what the last committed transaction read)."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        parts = [TopicPartition(self.topic, q) for q in range(self.queues)]
        committed = self._retried(consumer.committed, parts, CALL_TIMEOUT_S)
        consumer.assign(
            [
                TopicPartition(self.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                for tp in committed
            ]
        )

    def _retried(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call`` again while librdkafka says its error is retriable (and the run goes on)."""
        from confluent_kafka import KafkaException

        while True:
            try:
                return call(*args)
            except KafkaException as exc:
                if not exc.args[0].retriable() or self.stop.is_set():
                    raise
                time.sleep(0.2)


@dataclass
class TxnVerdict:
    committed_offsets: dict[int, int]
    output: int
    #: Inputs below the committed offset that the output lacks.
    missing: list[str] = field(default_factory=list)
    #: Output values there more than once.
    duplicated: list[str] = field(default_factory=list)
    #: Output values whose input is at or past the committed offset, or not in the input at all.
    uncommitted: list[str] = field(default_factory=list)
    #: Of ``missing``: those stored in :data:`OUT` (read over HTTP) that ``read_committed`` did
    #: not return: hidden by the aborted-transaction filter, not lost.
    hidden: list[str] = field(default_factory=list)
    #: Of ``duplicated``: where :data:`OUT` stores each (queue, offsets), read over HTTP: stored
    #: twice, or stored once and read back twice.
    stored_at: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not (self.missing or self.duplicated or self.uncommitted)


def check(url: str, servers: str, topic: str, queues: int) -> TxnVerdict:
    """The output against the committed offsets, on the final master (module docstring)."""
    with httpx.Client(base_url=url, timeout=30) as http:
        committed = group_offsets(http, GROUP, topic)
        inputs = {q: queue_bodies(http, topic, q) for q in range(queues)}
    where = {body: (q, offset) for q, rows in inputs.items() for offset, body in rows.items()}
    output = Counter(read_committed(servers, queues))
    verdict = TxnVerdict(committed, sum(output.values()))
    verdict.duplicated = sorted(v for v, n in output.items() if n > 1)
    for value in output:
        q, offset = where.get(value.removeprefix(PREFIX), (-1, 1 << 62))
        if offset >= committed.get(q, -1):
            verdict.uncommitted.append(value)
    for q, rows in inputs.items():
        verdict.missing += [
            PREFIX + body
            for offset, body in rows.items()
            if offset < committed.get(q, -1) and PREFIX + body not in output
        ]
    if verdict.missing or verdict.duplicated:
        with httpx.Client(base_url=url, timeout=30) as http:
            stored = {
                (q, offset): body
                for q in range(queues)
                for offset, body in queue_bodies(http, OUT, q).items()
            }
        bodies = set(stored.values())
        verdict.hidden = [value for value in verdict.missing if value in bodies]
        twice = set(verdict.duplicated)
        for (q, offset), body in sorted(stored.items()):
            if body in twice:
                verdict.stored_at.setdefault(body, []).append((q, offset))
    return verdict


def explain(loop: KafkaTransformer, verdict: TxnVerdict, started: float) -> list[str]:
    """For each transaction that read a missing or a duplicated input: when it began (seconds
    from ``started``, the history's clock), how it ended, and how many of its inputs are
    missing or twice in the output; then where the duplicated outputs are stored."""
    missing = {value.removeprefix(PREFIX) for value in verdict.missing}
    twice = {value.removeprefix(PREFIX) for value in verdict.duplicated}
    lines = []
    for began, values, outcome in loop.tried:
        lost = [v for v in values if v in missing]
        doubled = [v for v in values if v in twice]
        if lost or doubled:
            what = [f"{len(lost)} missing"] if lost else []
            what += [f"{len(doubled)} twice"] if doubled else []
            first = (lost or doubled)[0]
            lines.append(
                f"{began - started:8.2f} s  a transaction of {len(values)} inputs ended {outcome}: "
                f"{', '.join(what)} (first {first})"
            )
    for value, places in sorted(verdict.stored_at.items())[:10]:
        lines.append(f"{value} stored at (queue, offset) {places}")
    return lines


def read_committed(servers: str, queues: int, timeout_s: float = 120.0) -> list[str]:
    """Every committed value of :data:`OUT`, read to each partition's end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "jepsen-eos-checker", "isolation.level": "read_committed",
         "enable.auto.commit": False, "enable.partition.eof": True}
    )  # fmt: skip
    consumer.assign([TopicPartition(OUT, q, OFFSET_BEGINNING) for q in range(queues)])
    values: list[str] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < queues:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read_committed of {OUT} did not reach the end of {queues - len(at_end)} partitions"
                )
            for message in consumer.consume(1000, 1.0):
                error, partition, value = message.error(), message.partition(), message.value()
                if error is None and value is not None:
                    values.append(value.decode())
                    at_end.discard(partition or 0)
                elif error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition or 0)
    finally:
        consumer.close()
    return values


def transformer(
    cluster: Any, members: tuple[str, ...], topic: str, queues: int, stop: threading.Event
) -> KafkaTransformer:
    """The loop, not started, bootstrapped at every member; :data:`OUT` created with ``queues``."""
    with httpx.Client(base_url=cluster.brokers[members[0]].url, timeout=30) as http:
        created = http.put(f"/topics/{OUT}", json={"queues": queues})
        assert created.status_code in (200, 201), created.text
    return KafkaTransformer(kafka_servers(cluster, members), topic, queues, stop)
