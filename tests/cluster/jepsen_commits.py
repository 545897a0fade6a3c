"""Group commits in the Jepsen run (tests/cluster/jepsen.py): consumers read the topic and
commit next-to-consume offsets through every fault, and a checker decides commit by commit.

* **Workload.** An HTTP consumer (``GET`` a page of a queue, then ``PUT /groups/G/offsets``, at a
  random live member as the HTTP producer does) and a Kafka consumer (confluent-kafka, assigned
  every partition, ``commit(asynchronous=False)`` after each poll), each in its own group. Each
  commit is recorded ``ok`` (answered 200 / committed), ``fail`` (refused with an answer) or
  ``info`` (no answer: it may or may not have landed), with the body of the message just below
  the committed offset: the last one the consumer read.
* **Checker** (:func:`check`), on the final master after the heal, for every acknowledged
  commit: the group's committed offset of that queue is at or past it (an acknowledged commit
  never goes back, so no message below it is delivered again to the group), and the message at
  ``offset - 1`` is the one the consumer had read there (the commit still names the same place
  in the log: no truncation moved messages under it).

A commit is a ``rmq_sys_CONSUMER_OFFSETS`` record acknowledged by the replication rule
(docs/replication.md), appended after the messages it covers: an acknowledged commit implies
they are replicated too.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.cluster import ProcessCluster

#: The groups the two consumers commit for (distinct: the checker reads each group's offsets).
HTTP_GROUP = "jepsen-http-consumer"
KAFKA_GROUP = "jepsen-kafka-consumer"
PAGE = 50


@dataclass(frozen=True)
class Commit:
    """One commit: ``offset`` is the next to consume; ``last`` the body the consumer read at
    ``offset - 1``."""

    kind: str
    group: str
    queue: int
    offset: int
    last: str


@dataclass
class CommitHistory:
    """Acknowledged commits, and how many were refused or left unknown."""

    acknowledged: list[Commit] = field(default_factory=list)
    refused: int = 0
    unknown: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: str, commit: Commit) -> None:
        with self.lock:
            if outcome == "ok":
                self.acknowledged.append(commit)
            elif outcome == "fail":
                self.refused += 1
            else:
                self.unknown += 1


class HttpCommitter(threading.Thread):
    """Reads a page of a random queue at the group's position and commits past it."""

    def __init__(
        self, cluster: ProcessCluster, members: tuple[str, ...], topic: str, queues: int,
        history: CommitHistory, stop: threading.Event,
    ) -> None:  # fmt: skip
        super().__init__(name="jepsen-http-commits", daemon=True)
        self.cluster, self.members, self.topic, self.queues = cluster, members, topic, queues
        self.history, self.stop = history, stop
        self.position = dict.fromkeys(range(queues), 0)

    def run(self) -> None:
        while not self.stop.is_set():
            live = [b for k, b in self.cluster.brokers.items() if k in self.members and b.alive]
            if not live:
                time.sleep(0.2)
                continue
            if not self._step(random.choice(live).url, random.randrange(self.queues)):
                time.sleep(0.1)

    def _step(self, url: str, queue: int) -> bool:
        """One read and commit at ``url``; False when there was nothing to do or no answer."""
        try:
            page = httpx.get(
                f"{url}/topics/{self.topic}/queues/{queue}/messages",
                params={"offset": self.position[queue], "max_messages": PAGE},
                timeout=10,
            )
        except httpx.HTTPError:
            return False
        if page.status_code != 200 or not page.json()["messages"]:
            return False
        read = page.json()
        commit = Commit("http", HTTP_GROUP, queue, read["next_offset"], read["messages"][-1]["body"])
        try:
            answer = httpx.put(
                f"{url}/groups/{HTTP_GROUP}/offsets",
                json={"topic": self.topic, "offsets": {str(queue): commit.offset}},
                timeout=10,
            )
        except httpx.HTTPError:
            self.history.record("info", commit)
            return False
        if answer.status_code == 200:
            self.history.record("ok", commit)
            self.position[queue] = commit.offset
            return True
        self.history.record("fail", commit)
        return False


class KafkaCommitter(threading.Thread):
    """A confluent-kafka consumer assigned every partition, committing synchronously after each
    poll the offset past the last message it got of each partition."""

    def __init__(
        self, servers: str, topic: str, queues: int, history: CommitHistory, stop: threading.Event
    ) -> None:
        super().__init__(name="jepsen-kafka-commits", daemon=True)
        self.servers, self.topic, self.queues = servers, topic, queues
        self.history, self.stop = history, stop

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.servers,
                "group.id": KAFKA_GROUP,
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
                "socket.timeout.ms": 10_000,
            }
        )
        consumer.assign([TopicPartition(self.topic, q, OFFSET_BEGINNING) for q in range(self.queues)])
        try:
            while not self.stop.is_set():
                last: dict[int, Any] = {}
                for message in consumer.consume(PAGE, timeout=0.5):
                    partition = message.partition()
                    if message.error() is None and partition is not None:
                        last[partition] = message
                if not last:
                    continue
                commits = [
                    Commit("kafka", KAFKA_GROUP, part, m.offset() + 1, m.value().decode())
                    for part, m in last.items()
                ]
                try:
                    consumer.commit(
                        offsets=[TopicPartition(self.topic, c.queue, c.offset) for c in commits],
                        asynchronous=False,
                    )
                except KafkaException:
                    for commit in commits:  # a timeout may have landed: unknown, not refused
                        self.history.record("info", commit)
                    continue
                for commit in commits:
                    self.history.record("ok", commit)
        finally:
            consumer.close()


@dataclass
class CommitVerdict:
    acknowledged: int
    #: Acknowledged commits the final master's offset is below: (commit, committed offset).
    went_back: list[tuple[Commit, int]]
    #: Acknowledged commits whose message below is not the one the consumer read: (commit, body).
    moved: list[tuple[Commit, str | None]]

    @property
    def valid(self) -> bool:
        return not (self.went_back or self.moved)


def check(url: str, topic: str, queues: int, history: CommitHistory) -> CommitVerdict:
    """Every acknowledged commit against the final master at ``url`` (see the module docstring)."""
    with httpx.Client(base_url=url, timeout=30) as http:
        bodies = {q: queue_bodies(http, topic, q) for q in range(queues)}
        committed = {group: group_offsets(http, group, topic) for group in (HTTP_GROUP, KAFKA_GROUP)}
    went_back, moved = [], []
    for commit in history.acknowledged:
        now = committed[commit.group].get(commit.queue, -1)
        if now < commit.offset:
            went_back.append((commit, now))
        rows = bodies[commit.queue]
        below = rows.get(commit.offset - 1)
        if below != commit.last:
            moved.append((commit, below))
    return CommitVerdict(len(history.acknowledged), went_back, moved)


def group_offsets(http: httpx.Client, group: str, topic: str) -> dict[int, int]:
    """queue -> the group's committed (next-to-consume) offset, -1 where it never committed."""
    answer = http.get(f"/groups/{group}/offsets", params={"topic": topic}).json()
    return {int(q): o for q, o in answer["offsets"].items()}


def kafka_servers(cluster: ProcessCluster, members: tuple[str, ...]) -> str:
    """``bootstrap.servers`` naming every member's Kafka port."""
    return ",".join(
        f"127.0.0.1:{b.kafka_port}" for k, b in cluster.brokers.items() if k in members and b.kafka_port
    )


def queue_bodies(http: httpx.Client, topic: str, queue: int) -> dict[int, str]:
    """offset -> body of every message of ``queue`` (the run keeps everything: no retention)."""
    rows: dict[int, str] = {}
    offset = 0
    while True:
        page = http.get(
            f"/topics/{topic}/queues/{queue}/messages", params={"offset": offset, "max_messages": 5000}
        ).json()
        for message in page["messages"]:
            rows[message["queue_offset"]] = message["body"]
        if not page["messages"]:
            return rows
        offset = page["next_offset"]


def committers(
    cluster: ProcessCluster, members: tuple[str, ...], topic: str, queues: int,
    history: CommitHistory, stop: threading.Event,
) -> list[threading.Thread]:  # fmt: skip
    """Both consumers, not started: HTTP at any live member, Kafka bootstrapped at every member."""
    return [
        HttpCommitter(cluster, members, topic, queues, history, stop),
        KafkaCommitter(kafka_servers(cluster, members), topic, queues, history, stop),
    ]
