"""Expiry: what happens when a message's invisible time passes unacked.

Redelivery needs no write here: a receive hands out in-flight messages whose visible-at has
passed (in place, attempt + 1). This module does the rest:

* :func:`dead_letters`: in-flight messages past their visible-at that used every attempt
  (``attempt > max_retries``, i.e. ``max_retries + 1`` deliveries) become ``%DLQ%group``
  copies built by the store's :func:`~store.dead_letter_record` (RocketMQ's properties:
  ``RETRY_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``DELAY=0``, UNIQ_KEY kept, reconsume times = the
  deliveries) and DEAD state records, appended together in one atomic put: a crash leaves
  both or neither, so a dead letter is written once.
* :class:`ExpiryThread`: calls ``PopService.run_due`` at the next visible-at (at most
  ``expiry_tick_ms`` apart), which also wakes long polls, so a redelivery reaches a waiting
  receive within one tick of its visible-at.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

from broker.pop.picking import read_one, source_topic
from broker.pop.state_codec import Entry, Kind, StateRecord
from broker.pop.table import PopTable
from store import MessageStore, RecordFields, SparkMQError, dead_letter_record, dlq_topic

log = logging.getLogger("sparkmq.broker.pop")

#: Dead letters written per append (bounds one run's put size).
MAX_DEAD_PER_RUN = 256


def dead_letters(
    store: MessageStore, table: PopTable, now_ms: int
) -> tuple[list[StateRecord], list[RecordFields]]:
    """(DEAD records, DLQ copies) for every in-flight message that used all its attempts and
    whose invisible time has passed. Messages no longer stored get a DEAD record and no copy."""
    records: list[StateRecord] = []
    copies: list[RecordFields] = []
    for (group, topic), lane in table.lanes.items():
        limit = table.group_settings(group).max_retries
        dead: list[Entry] = []
        for entry in lane.visible(now_ms):
            if entry.attempt <= limit:
                continue
            if len(copies) >= MAX_DEAD_PER_RUN:
                break
            dead.append(entry)
            view = read_one(
                store, source_topic(group, topic, entry.source), entry.queue_id, entry.queue_offset
            )
            raw = None if view is None else store.read_record(view.commitlog_offset)
            if raw is None:
                log.warning(
                    "POP %s/%s: %s is no longer stored: nothing to dead-letter", group, topic, entry.key
                )
                continue
            target = dlq_topic(group)
            if not store.has_topic(target):
                store.create_topic(target, 1)  # RocketMQ creates a DLQ topic with one queue
            copies.append(dead_letter_record(raw, group=group, reconsume_times=entry.attempt))
        if dead:
            records.append(StateRecord(Kind.DEAD, now_ms, group, topic, entries=tuple(dead)))
    return records, copies


class DueRunner(Protocol):
    """What the expiry loop drives: :class:`broker.pop.service.PopService`."""

    @property
    def store(self) -> MessageStore: ...

    def run_due(self) -> int | None: ...


class ExpiryThread:
    """The background loop over ``PopService.run_due``; a failure is logged and retried on
    the next tick, and shown by :attr:`last_error` (nothing is lost: the entries stay in flight)."""

    def __init__(self, service: DueRunner, tick_ms: int) -> None:
        self._service = service
        self._tick_s = tick_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pop-expiry", daemon=True)
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = self._tick_s
            try:
                next_due = self._service.run_due()
                self.last_error = None
                ahead_ms = None if next_due is None else next_due - self._service.store.now_ms()
                if ahead_ms is not None and ahead_ms > 0:
                    wait = min(wait, ahead_ms / 1000)
            except SparkMQError as exc:
                error = f"{type(exc).__name__}: {exc}"
                if error != self.last_error:  # once per distinct failure, not once per tick
                    log.warning("POP expiry failed (retried every tick): %s", error)
                self.last_error = error
            self._stop.wait(max(wait, 0.001))
