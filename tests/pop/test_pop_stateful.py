"""Hypothesis state machine: POP consumption over a real store against a model, across crashes.

Model, per message (a unique body): never delivered, in flight (its current handle, attempt
and visible-at), acked or dead-lettered. Steps: produce, receive, ack (current, stale and
garbage handles mixed), change the invisible time, advance the clock, run the expiry, crash
(``abandon``: the page cache as after kill -9) or close and reopen, and drain.

Checked at every step: a receive hands out only messages not acked nor dead that are new or
past their invisible time, with attempt = previous + 1; an ack or change succeeds exactly for
the current handle of a message in flight. ``drain`` checks the other half: once every
invisible time has passed, the unacked messages all come back (or sit in the DLQ when their
attempts are used up), and nothing else does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.pop import PopConfig, PopService, Received
from store import Message, MessageStore, StoreConfig
from tests.support.stores import ManualClock, tiny_config

TOPIC, GROUP, MAX_RETRIES = "t", "g", 3


@dataclass
class Flight:
    handle: str
    attempt: int
    visible_at_ms: int


class PopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="sparkmq-pop-stateful-"))
        self.clock = ManualClock()
        self.store = MessageStore.open(self._config(), clock_ms=self.clock)
        self.store.create_topic(TOPIC, 3)
        self.service = PopService(self.store, PopConfig(background=False, snapshot_every_records=7))
        self.service.configure_group(GROUP, max_retries=MAX_RETRIES)
        self.produced = 0
        self.new: set[bytes] = set()
        self.flying: dict[bytes, Flight] = {}
        self.acked: set[bytes] = set()
        self.dead: set[bytes] = set()
        self.attempts: dict[bytes, int] = {}
        self.old_handles: list[str] = []

    def _config(self) -> StoreConfig:
        return tiny_config(self.dir, commitlog_file_size_bytes=256 * 1024, consume_queue_units_per_file=32)

    def teardown(self) -> None:
        self.service.close()
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ steps
    @rule(count=st.integers(1, 6))
    def produce(self, count: int) -> None:
        new = [b"m%d" % (self.produced + i) for i in range(count)]
        self.store.put_messages([Message(topic=TOPIC, body=b) for b in new])
        self.produced += count
        self.new.update(new)

    def _take(self, got: list[Received]) -> None:
        now = self.clock.now_ms
        for r in got:
            body = r.message.body
            assert body not in self.acked and body not in self.dead, f"{body!r} delivered after ack/DLQ"
            if body in self.new:
                assert r.delivery_attempt == 1
                self.new.discard(body)
            else:
                previous = self.flying[body]
                assert previous.visible_at_ms <= now, f"{body!r} delivered while invisible"
                assert r.delivery_attempt == previous.attempt + 1
                assert previous.attempt <= MAX_RETRIES
                self.old_handles.append(previous.handle)
            self.flying[body] = Flight(r.receipt_handle, r.delivery_attempt, r.invisible_until_ms)

    @rule(max_messages=st.integers(1, 32), invisible=st.sampled_from([1_000, 3_000, 10_000]))
    def receive(self, max_messages: int, invisible: int) -> None:
        got = self.service.receive(GROUP, TOPIC, max_messages, invisible)
        assert len(got) <= max_messages
        self._take(got)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        current = {f.handle: b for b, f in self.flying.items()}
        pool = list(current) + self.old_handles[-5:] + ["garbage"]
        chosen = data.draw(st.lists(st.sampled_from(pool), max_size=6, unique=True))
        results = self.service.ack(GROUP, chosen)
        for handle, result in zip(chosen, results, strict=True):
            if handle in current:
                assert result.ok, result
                body = current[handle]
                del self.flying[body]
                self.acked.add(body)
            else:
                assert not result.ok
                assert result.code == (
                    "invalid_receipt_handle" if handle == "garbage" else "receipt_handle_expired"
                )

    @precondition(lambda self: bool(self.flying))
    @rule(data=st.data(), invisible=st.sampled_from([1_000, 5_000]))
    def change(self, data: st.DataObject, invisible: int) -> None:
        body = data.draw(st.sampled_from(sorted(self.flying)))
        flight = self.flying[body]
        got = self.service.change_invisible(GROUP, flight.handle, invisible)
        self.old_handles.append(flight.handle)
        self.flying[body] = Flight(got.receipt_handle, flight.attempt, self.clock.now_ms + invisible)

    @rule(ms=st.sampled_from([500, 1_000, 2_999, 10_000]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def run_due(self) -> None:
        self.service.run_due()
        self._collect_dead()

    def _collect_dead(self) -> None:
        now = self.clock.now_ms
        for body, flight in list(self.flying.items()):
            if flight.attempt > MAX_RETRIES and flight.visible_at_ms <= now:
                del self.flying[body]
                self.dead.add(body)

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        self.service.close()
        if crash:
            self.store.abandon()
        else:
            self.service.snapshot()
            self.store.close()
        self.store = MessageStore.open(self._config(), clock_ms=self.clock)
        self.service = PopService(self.store, self.service.config)

    @rule()
    def drain(self) -> None:
        latest = max((f.visible_at_ms for f in self.flying.values()), default=self.clock.now_ms)
        self.clock.advance(max(0, latest - self.clock.now_ms) + 1)
        self.service.run_due()
        self._collect_dead()
        expected = self.new | set(self.flying)
        seen: set[bytes] = set()
        while got := self.service.receive(GROUP, TOPIC, 32, 60_000):
            self._take(got)
            seen.update(r.message.body for r in got)
        assert seen == expected, (sorted(expected - seen), sorted(seen - expected))

    @invariant()
    def dead_letters_match(self) -> None:
        dlq = self.store.queue_offsets("%DLQ%g") if self.store.has_topic("%DLQ%g") else {}
        assert sum(hi for _, hi in dlq.values()) == len(self.dead)

    @invariant()
    def every_message_accounted_for(self) -> None:
        assert len(self.new) + len(self.flying) + len(self.acked) + len(self.dead) == self.produced


PopMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("POP_EXAMPLES", "25")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPopMachine = PopMachine.TestCase
