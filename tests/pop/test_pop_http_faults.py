"""Three competing consumers, 10,000 messages, each acked exactly once, through ``kill -9``s of
the broker and master failovers (real ``sparkmq serve`` processes of a SYNC replica group, the
HTTP door and ``client.simple_consumer``).

The nemesis is the Jepsen harness's (tests/cluster/jepsen.py): ``kill -9`` of the group's
master, so another member is elected, then a restart of the killed member (it recovers from
its own store after the kill and rejoins as a slave); twice. Consumers leave one message in 97
unacked on its first delivery (a consumer that died holding it).

The checker decides message by message, from the history of every receive and ack:
* every message is acked ``ok`` exactly once;
* no message is delivered by a receive that started after an ``ok`` ack of it was answered
  (an acked message is never delivered again, across the failovers);
* every delivery not acked ``ok`` is followed by a later delivery of the same message (an
  unacked message comes back), with a higher delivery attempt.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from sparkmq.client import Client, ClientConfig, ClientError, PopMessage, SimpleConsumer
from tests.cluster.jepsen import BROKER_ARGS, GROUP, MEMBERS, describe, master_key
from tests.support.cluster import ProcessCluster
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

TOPIC = "pop_faults"
CONSUMER_GROUP = "workers"
MESSAGES = 10_000
INVISIBLE_MS = 4_000
#: Kill the master when this many messages are acked, once each.
KILL_AT = (2_500, 6_000)


@dataclass
class Delivery:
    body: str
    attempt: int
    consumer: int
    asked_at: float
    answered_at: float
    ack: str = "none"  # ok | an error code | "none" (left unacked) | "error" (no answer)
    acked_at: float = 0.0


@dataclass
class History:
    deliveries: list[Delivery] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acked(self) -> int:
        with self.lock:
            return len({d.body for d in self.deliveries if d.ack == "ok"})


def _consume(client: Client, index: int, history: History, stop: threading.Event) -> None:
    consumer = client.simple_consumer(TOPIC, CONSUMER_GROUP, invisible_ms=INVISIBLE_MS)
    while not stop.is_set():
        asked = time.monotonic()
        try:
            got = consumer.receive(max_messages=32, wait_ms=1000)
        except ClientError as exc:
            history.errors.append(f"receive: {exc}")
            time.sleep(0.2)
            continue
        answered = time.monotonic()
        batch = [Delivery(m.text or "", m.delivery_attempt, index, asked, answered) for m in got]
        with history.lock:
            history.deliveries += batch
        keep = [m for m in got if not (int((m.text or "m0")[1:]) % 97 == 0 and m.delivery_attempt == 1)]
        _ack(consumer, keep, {id(m): d for m, d in zip(got, batch, strict=True)}, history)


def _ack(
    consumer: SimpleConsumer, messages: list[PopMessage], record: dict[int, Delivery], history: History
) -> None:
    if not messages:
        return
    try:
        outcomes = consumer.ack(messages)
    except ClientError as exc:  # no answer in time: unknown, counted as not acked
        history.errors.append(f"ack: {exc}")
        for m in messages:
            record[id(m)].ack = "error"
        return
    done = time.monotonic()
    for m, outcome in zip(messages, outcomes, strict=True):
        delivery = record[id(m)]
        delivery.ack = "ok" if outcome.ok else str(outcome.error)
        delivery.acked_at = done


def _nemesis(cluster: ProcessCluster, history: History, stop: threading.Event) -> None:
    for threshold in KILL_AT:

        def reached(threshold: int = threshold) -> bool:
            return history.acked() >= threshold or stop.is_set()

        wait_until(reached, 300, f"{threshold} acked")
        if stop.is_set():
            return
        master = master_key(cluster)
        assert master is not None
        history.events.append((time.monotonic(), f"kill -9 master {master}"))
        cluster.brokers[master].kill()

        def moved(old: str = master) -> bool:
            return master_key(cluster) not in (None, old)

        wait_until(moved, 120, "a new master")
        history.events.append((time.monotonic(), f"new master {master_key(cluster)}"))
        cluster.restart(master)
        wait_until(lambda: len((describe(cluster) or {}).get("in_sync") or []) >= 2, 120, "two in sync")
        history.events.append((time.monotonic(), f"{master} back"))


def _stalled(history: History, threads: list[threading.Thread]) -> str:
    with history.lock:
        acked = {d.body for d in history.deliveries if d.ack == "ok"}
        delivered = {d.body for d in history.deliveries}
        last = history.deliveries[-1].answered_at if history.deliveries else 0.0
    missing = sorted({f"m{i}" for i in range(MESSAGES)} - acked, key=lambda b: int(b[1:]))
    return (
        f"stalled: {len(acked)} acked, {len(delivered)} delivered, last delivery "
        f"{time.monotonic() - last:.0f} s ago; not acked: {missing[:20]} (of {len(missing)}; "
        f"{len(set(missing) - delivered)} never delivered); consumers alive "
        f"{[t.is_alive() for t in threads]}; errors {history.errors[-10:]}; events {history.events}"
    )


def check(history: History, expected: set[str]) -> list[str]:
    """The violations, message by message (empty: the run is correct)."""
    by_body: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in history.deliveries:
        by_body[delivery.body].append(delivery)
    problems = [f"{body}: never delivered" for body in sorted(expected - by_body.keys())]
    problems += [f"{body}: not a message sent" for body in sorted(by_body.keys() - expected)]
    for body, deliveries in by_body.items():
        deliveries.sort(key=lambda d: d.answered_at)
        oks = [d for d in deliveries if d.ack == "ok"]
        if len(oks) != 1:
            problems.append(f"{body}: acked ok {len(oks)} times")
            continue
        acked_at = oks[0].acked_at
        for d in deliveries:
            if d.asked_at > acked_at:
                problems.append(f"{body}: delivered (attempt {d.attempt}) after its ack was answered")
        for i, d in enumerate(deliveries):
            if d.ack != "ok" and not any(
                later.answered_at > d.answered_at and later.attempt > d.attempt
                for later in deliveries[i + 1 :]
            ):
                problems.append(f"{body}: unacked attempt {d.attempt} ({d.ack}) never came back")
    return problems


def test_three_consumers_ten_thousand_messages_through_kills_and_failovers(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster:
        for key in MEMBERS:
            cluster.add(GROUP, ha=True, args=BROKER_ARGS, member=key)
        wait_until(lambda: master_key(cluster), 90, "a master")
        wait_until(lambda: len((describe(cluster) or {}).get("in_sync") or []) == 3, 90, "all in sync")
        urls = [cluster.brokers[key].url for key in MEMBERS]
        config = ClientConfig(request_timeout_ms=10_000)
        with Client(urls, config=config) as producer:
            producer.create_topic(TOPIC, 4)
            for start in range(0, MESSAGES, 500):
                producer.send_batch(TOPIC, [{"body": f"m{i}"} for i in range(start, start + 500)])
        history = History()
        stop = threading.Event()
        clients = [Client(urls, config=config) for _ in range(3)]
        threads = [
            threading.Thread(target=_consume, args=(c, i, history, stop), name=f"consumer-{i}")
            for i, c in enumerate(clients)
        ]
        nemesis = threading.Thread(target=_nemesis, args=(cluster, history, stop), name="nemesis")
        for thread in [*threads, nemesis]:
            thread.start()
        try:
            try:
                wait_until(lambda: history.acked() >= MESSAGES, 400, "all acked")
            except AssertionError:
                raise AssertionError(_stalled(history, threads)) from None
            nemesis.join(timeout=300)
            # Nothing more comes: every message is done for the group.
            time.sleep(INVISIBLE_MS / 1000 + 1)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            nemesis.join(timeout=60)
            for c in clients:
                c.close()
        kills = [what for _, what in history.events if what.startswith("kill")]
        assert len(kills) == len(KILL_AT), history.events
        problems = check(history, {f"m{i}" for i in range(MESSAGES)})
        redelivered = {d.body for d in history.deliveries if d.attempt > 1}
        left_unacked = {f"m{i}" for i in range(0, MESSAGES, 97)}
        assert left_unacked <= redelivered, sorted(left_unacked - redelivered)[:10]
        print(
            f"{len(history.deliveries)} deliveries, {len(redelivered)} messages redelivered, "
            f"{len(history.errors)} client errors; events {history.events}"
        )
        assert problems == [], f"{len(problems)} violations, first: {problems[:20]}; events {history.events}"
        master = cluster.brokers[master_key(cluster) or MEMBERS[0]]
        path = f"/groups/{CONSUMER_GROUP}/topics/{TOPIC}/messages:receive"
        left = httpx.post(master.url + path, json={"max_messages": 32, "invisible_ms": 60_000}, timeout=30)
        assert left.status_code == 200, left.text
        assert left.json()["messages"] == []
