"""Hypothesis state machine: the store against an in-memory model, across crashes and reopens.

Model: per (topic, queue) the list of acknowledged bodies. A crash (``abandon``: no flush, abort
left behind, as after kill -9) and a clean close must both preserve every acknowledged message,
in order, with contiguous queue offsets; reads at any offset must agree with the model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from store import GetStatus, Message, MessageStore
from tests.support.stores import ManualClock, tiny_config

TOPICS = ("alpha", "beta")
QUEUES = 3
bodies = st.binary(min_size=0, max_size=600) | st.just(b"z" * 5000)  # the latter is compressed
tags = st.sampled_from([None, "a", "b"])


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sparkmq-stateful-"))
        self.clock = ManualClock()
        self.config = tiny_config(
            self.dir, commitlog_file_size_bytes=16 * 1024, consume_queue_units_per_file=16
        )
        self.store: MessageStore | None = MessageStore.open(self.config, clock_ms=self.clock)
        for topic in TOPICS:
            self.store.create_topic(topic, QUEUES)
        self.model: dict[tuple[str, int], list[tuple[bytes, str | None]]] = {
            (t, q): [] for t in TOPICS for q in range(QUEUES)
        }

    @property
    def ms(self) -> MessageStore:
        assert self.store is not None
        return self.store

    @rule(topic=st.sampled_from(TOPICS), queue=st.integers(0, QUEUES - 1), body=bodies, tag=tags)
    def put_one(self, topic: str, queue: int, body: bytes, tag: str | None) -> None:
        r = self.ms.put_message(Message(topic=topic, body=body, tags=tag, queue_id=queue))
        assert r.queue_offset == len(self.model[(topic, queue)])
        self.model[(topic, queue)].append((body, tag))
        self.clock.advance(1)

    @rule(
        items=st.lists(
            st.tuples(st.sampled_from(TOPICS), st.integers(0, QUEUES - 1), bodies, tags),
            min_size=1,
            max_size=30,
        )
    )
    def put_many(self, items: list[tuple[str, int, bytes, str | None]]) -> None:
        results = self.ms.put_messages([Message(topic=t, body=b, tags=g, queue_id=q) for t, q, b, g in items])
        for (t, q, b, g), r in zip(items, results, strict=True):
            assert r.queue_offset == len(self.model[(t, q)])
            self.model[(t, q)].append((b, g))

    @rule(topic=st.sampled_from(TOPICS), queue=st.integers(0, QUEUES - 1), data=st.data())
    def get(self, topic: str, queue: int, data: st.DataObject) -> None:
        expected = self.model[(topic, queue)]
        offset = data.draw(st.integers(0, len(expected) + 2))
        limit = data.draw(st.integers(1, 40))
        got = self.ms.get_messages(topic, queue, offset, limit)
        if offset < len(expected):
            assert got.status is GetStatus.FOUND
            assert [m.body for m in got.messages] == [b for b, _ in expected[offset : offset + limit]]
            assert got.next_offset == min(len(expected), offset + limit)
        else:
            assert got.status is not GetStatus.FOUND and got.messages == []

    @rule(topic=st.sampled_from(TOPICS), queue=st.integers(0, QUEUES - 1), tag=st.sampled_from(["a", "b"]))
    def read_batch_by_tag(self, topic: str, queue: int, tag: str) -> None:
        batch = self.ms.read_batch(topic, queue, 0, 10_000, tag).batch
        assert batch.column("body").to_pylist() == [b for b, g in self.model[(topic, queue)] if g == tag]

    @precondition(lambda self: self.store is not None)
    @rule()
    def crash_and_reopen(self) -> None:
        self.ms.abandon()
        self.store = MessageStore.open(self.config, clock_ms=self.clock)
        assert self.ms.recovery is not None and self.ms.recovery.abnormal

    @precondition(lambda self: self.store is not None)
    @rule()
    def close_and_reopen(self) -> None:
        self.ms.close()
        self.store = MessageStore.open(self.config, clock_ms=self.clock)
        assert self.ms.recovery is not None and not self.ms.recovery.abnormal

    @invariant()
    def max_offsets_match(self) -> None:
        for (topic, queue), items in self.model.items():
            assert self.ms.max_offset(topic, queue) == len(items)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)


StoreMachine.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestStoreMachine = StoreMachine.TestCase
