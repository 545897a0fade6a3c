"""Three competing consumer threads of one POP group over 10,000 messages: each acked once."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from broker.pop import PopService
from store import Message, MessageStore
from tests.support.stores import light_config

COUNT = 10_000


def test_three_competing_consumers_ack_each_message_exactly_once(tmp_path: Path) -> None:
    store = MessageStore.open(light_config(tmp_path))
    store.create_topic("t", 4)
    for start in range(0, COUNT, 1_000):
        store.put_messages([Message(topic="t", body=b"m%d" % i) for i in range(start, start + 1_000)])
    service = PopService(store)
    acked: Counter[bytes] = Counter()
    per_consumer: Counter[int] = Counter()
    failures: list[str] = []
    lock = threading.Lock()

    def consume(me: int) -> None:
        idle = 0
        while idle < 3:
            got = service.receive("g", "t", 32, 60_000, wait_ms=200)
            if not got:
                idle += 1
                continue
            idle = 0
            results = service.ack("g", [r.receipt_handle for r in got])
            with lock:
                for r, res in zip(got, results, strict=True):
                    if res.ok:
                        acked[r.message.body] += 1
                        per_consumer[me] += 1
                    else:
                        failures.append(f"{r.message.body!r}: {res.code}")

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(3)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert failures == []
        assert len(acked) == COUNT and set(acked.values()) == {1}
        assert all(per_consumer[i] > 0 for i in range(3)), per_consumer
        assert service.stats("g").inflight == 0
    finally:
        service.close()
        store.close()


def test_redelivery_reaches_a_waiting_receive_within_a_second_of_the_invisible_time(tmp_path: Path) -> None:
    store = MessageStore.open(light_config(tmp_path))
    store.create_topic("t", 4)
    store.put_messages([Message(topic="t", body=b"m%d" % i) for i in range(200)])
    service = PopService(store)
    try:
        first: dict[bytes, int] = {}
        while len(first) < 200:
            for r in service.receive("g", "t", 32, 1_000 + len(first) * 5):  # expiries spread over 1 s
                first[r.message.body] = r.invisible_until_ms
        lateness: list[int] = []
        while len(lateness) < 200:
            got = service.receive("g", "t", 32, 60_000, wait_ms=5_000)
            now = store.now_ms()
            assert got, "a redelivery did not come within the long poll"
            lateness += [now - first[r.message.body] for r in got]
            assert all(r.delivery_attempt == 2 for r in got)
        lateness.sort()
        assert lateness[0] >= 0
        assert lateness[int(len(lateness) * 0.99) - 1] <= 1_000, lateness[-10:]
    finally:
        service.close()
        store.close()
