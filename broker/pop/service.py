"""``PopService``: RocketMQ 5 POP consumption over one store (docs/pop.md).

Every call that changes state follows one order, under the service lock: validate (typed
errors, nothing touched) -> plan from the table and the store -> append the state records to
``rmq_sys_pop_state`` (:mod:`broker.pop.state_log`) -> apply them to the table -> answer. An
append the store refuses (not master, disk full) raises and changes nothing, so an answer
given is an answer stored.

Threads: callers (any number; one lock), the expiry thread (:meth:`run_due`: dead letters,
snapshots, waking long polls at the next visible-at) and the store's put path, which calls
:meth:`_on_arrival` (it only takes the wake condition, never the service lock).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Sequence

from broker.pop.config import MAX_MESSAGES_PER_RECEIVE, PopConfig
from broker.pop.errors import (
    GroupKindConflict,
    InvalidGroupSettings,
    InvalidInvisibleTime,
    InvalidMaxMessages,
    InvalidReceiptHandle,
    InvalidWaitTime,
    PopError,
    ReceiptHandleExpired,
    ReceiptHandleMismatch,
)
from broker.pop.expiry import ExpiryThread, dead_letters
from broker.pop.handle import ReceiptHandle, decode_handle, encode_handle
from broker.pop.picking import Picker, Request, read_one, source_topic
from broker.pop.state_codec import Entry, GroupSettings, Kind, StateRecord
from broker.pop.state_log import StateLog
from broker.pop.table import Lane, PopTable
from broker.pop.values import AckResult, GroupKind, GroupStats, Received
from store import (
    POP_STATE_TOPIC,
    MessageStore,
    MessageView,
    NotMaster,
    RecordFields,
    dead_letter_record,
    dlq_topic,
    retry_topic,
    validate_group,
    validate_topic,
)

log = logging.getLogger("sparkmq.broker.pop")


class PopService:
    """POP receive / ack / change-invisible over one :class:`~store.MessageStore`.

    One service per store: the doors (HTTP, gRPC) share it. Two services over one store would
    each keep a table of their own and hand the same messages out twice."""

    #: The open service of each store: the offset paths (:mod:`broker.offsets`) ask it a
    #: group's kind without every caller carrying the service.
    _by_store: weakref.WeakKeyDictionary[MessageStore, PopService] = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, store: MessageStore) -> PopService | None:
        """The open POP service over ``store``, if any."""
        return cls._by_store.get(store)

    def __init__(self, store: MessageStore, config: PopConfig | None = None) -> None:
        self.store = store
        self.config = (config or PopConfig()).validate()
        self._lock = threading.RLock()
        self._wake = threading.Condition()
        #: Wake-ups per topic ("" = everyone: expiries, acks, close), so an arrival on one topic
        #: sends only the long polls of that topic (or its retry topic) back to the store.
        self._wake_seqs: Counter[str] = Counter()
        #: Called with the topic ("" = everyone) on every wake-up, from any thread: the
        #: event-loop waiters of :mod:`broker.pop.waiting` (keep them cheap and non-blocking).
        self._wake_listeners: list[Callable[[str], None]] = []
        self._closed = False
        self._log = StateLog(store)
        self.table = PopTable()
        try:
            self.table = self._log.load()
        except NotMaster:
            log.info("POP: %s is a replica with no POP state yet: loaded once master", store.config.store_dir)
        self._picker = Picker(store)
        self._round_robin = itertools.count()
        self._redeliveries: Counter[str] = Counter()
        self._dead_letters: Counter[str] = Counter()
        store.add_arrival_listener(self._on_arrival)
        self._expiry = ExpiryThread(self, self.config.expiry_tick_ms) if self.config.background else None
        if self._expiry is not None:
            self._expiry.start()
        PopService._by_store[store] = self

    def close(self) -> None:
        """Stop the expiry thread and release every long poll (they answer empty)."""
        self._closed = True
        if PopService._by_store.get(self.store) is self:
            del PopService._by_store[self.store]
        if self._expiry is not None:
            self._expiry.stop()
        self.store.remove_arrival_listener(self._on_arrival)
        self.wake()

    def reload(self) -> None:
        """Rebuild the table from the state topic. The cluster layer calls it when this store
        becomes the master: the records the old master wrote arrived by replication (a
        replica's table is not kept live). Raises ``NotMaster`` on a replica with no state."""
        with self._lock:
            self.table = self._log.load()
        self.wake()

    def _ensure_loaded(self) -> None:
        """Load the table if the constructor could not (a replica then): NotMaster until then."""
        if not self.table.secret:
            with self._lock:
                if not self.table.secret:
                    self.table = self._log.load()

    # ------------------------------------------------------------------ groups
    def configure_group(
        self,
        group: str,
        *,
        max_retries: int | None = None,
        start_newest: bool | None = None,
        fifo: bool | None = None,
    ) -> GroupSettings:
        """Change a POP group's settings (stored in the state topic); returns them."""
        validate_group(group)
        self._ensure_loaded()
        self.check_group_kind(group, GroupKind.POP)
        with self._lock:
            now = self.table.group_settings(group)
            new = GroupSettings(
                now.max_retries if max_retries is None else max_retries,
                now.start_newest if start_newest is None else start_newest,
                now.fifo if fifo is None else fifo,
            )
            if not 0 <= new.max_retries <= 0xFFFF:
                raise InvalidGroupSettings(f"max_retries must be in [0, 65535], got {new.max_retries}")
            self._commit([StateRecord(Kind.CONFIG, self.store.now_ms(), group, tail=new.encode())])
            return new

    def group_kind(self, group: str) -> GroupKind | None:
        """POP once it received or was configured here, OFFSET when it has committed offsets,
        None for a group never seen."""
        if self.table.is_pop_group(group):
            return GroupKind.POP
        return GroupKind.OFFSET if group in self.store.groups() else None

    def check_group_kind(self, group: str, kind: GroupKind) -> None:
        """Raise :class:`GroupKindConflict` when ``group`` is of the other kind (the doors call
        this before an offset read or commit with ``GroupKind.OFFSET``)."""
        actual = self.group_kind(group)
        if actual is not None and actual is not kind:
            raise GroupKindConflict(
                f"group {group!r} is consumed by {actual.value} and cannot be used for "
                f"{kind.value} consumption; use another group name"
            )

    # ------------------------------------------------------------------ receive
    def receive(
        self,
        group: str,
        topic: str,
        max_messages: int = MAX_MESSAGES_PER_RECEIVE,
        invisible_ms: int = 30_000,
        wait_ms: int = 0,
        tag_expression: str | None = None,
    ) -> list[Received]:
        """Up to ``max_messages`` (1..32) messages of ``topic`` for ``group``, each invisible to
        other receives for ``invisible_ms``; with none to hand out, wait up to ``wait_ms`` for an
        arrival or a redelivery (an empty list when none came)."""
        self._check_receive(group, topic, max_messages, invisible_ms, wait_ms)
        deadline = time.monotonic() + wait_ms / 1000
        interests = ("", topic, retry_topic(group))
        while True:
            with self._wake:
                seen = [self._wake_seqs[name] for name in interests]
            got, next_visible_ms = self._receive_once(
                group, topic, max_messages, invisible_ms, tag_expression
            )
            remaining = deadline - time.monotonic()
            if got or remaining <= 0 or self._closed:
                return got
            if next_visible_ms is not None:
                remaining = min(remaining, max(0.001, (next_visible_ms - self.store.now_ms()) / 1000))
            until = time.monotonic() + min(remaining, self.config.expiry_tick_ms / 1000)
            with self._wake:
                while [self._wake_seqs[name] for name in interests] == seen:
                    left = until - time.monotonic()
                    if left <= 0:
                        break
                    self._wake.wait(left)

    def _check_receive(
        self, group: str, topic: str, max_messages: int, invisible_ms: int, wait_ms: int
    ) -> None:
        validate_group(group)
        validate_topic(topic)
        if not 1 <= max_messages <= MAX_MESSAGES_PER_RECEIVE:
            raise InvalidMaxMessages(
                f"max_messages must be in [1, {MAX_MESSAGES_PER_RECEIVE}], got {max_messages}"
            )
        self._check_invisible(invisible_ms)
        if not 0 <= wait_ms <= self.config.max_wait_ms:
            raise InvalidWaitTime(f"wait_ms must be in [0, {self.config.max_wait_ms}], got {wait_ms}")
        self._ensure_loaded()
        if not self.table.is_pop_group(group):
            self.check_group_kind(group, GroupKind.POP)

    def _check_invisible(self, invisible_ms: int) -> None:
        lo, hi = self.config.min_invisible_ms, self.config.max_invisible_ms
        if not lo <= invisible_ms <= hi:
            raise InvalidInvisibleTime(f"invisible_ms must be in [{lo}, {hi}], got {invisible_ms}")

    def _receive_once(
        self, group: str, topic: str, max_messages: int, invisible_ms: int, tag_expression: str | None
    ) -> tuple[list[Received], int | None]:
        with self._lock:
            now = self.store.now_ms()
            lane = self.table.lanes.get((group, topic)) or Lane()
            request = Request(
                group, topic, max_messages, invisible_ms, tag_expression, now, next(self._round_robin)
            )
            plan = self._picker.plan(request, lane, self.table.group_settings(group))
            records = []
            if plan.gone:
                log.warning(
                    "POP %s/%s: %d in-flight messages no longer stored, dropped", group, topic, len(plan.gone)
                )
                records.append(StateRecord(Kind.DEAD, now, group, topic, entries=tuple(plan.gone)))
            if plan.picks or plan.cursors:
                entries = tuple(pick.entry for pick in plan.picks)
                records.append(StateRecord(Kind.RECEIVE, now, group, topic, tuple(plan.cursors), entries))
            self._commit(records)
            lane = self.table.lanes.get((group, topic)) or lane
            lane.sharding_keys.update((k, v) for k, v in plan.sharding_keys.items() if k in lane.inflight)
            self._redeliveries[group] += sum(1 for pick in plan.picks if pick.entry.attempt > 1)
            secret = self.table.secret
            out = [
                Received(
                    pick.view,
                    encode_handle(self._handle(group, topic, pick.entry), secret),
                    pick.entry.attempt,
                    pick.entry.visible_at_ms,
                )
                for pick in plan.picks
            ]
            return out, lane.next_visible_at()

    @staticmethod
    def _handle(group: str, topic: str, entry: Entry) -> ReceiptHandle:
        return ReceiptHandle(
            group,
            topic,
            entry.source,
            entry.queue_id,
            entry.queue_offset,
            entry.generation,
            entry.visible_at_ms,
        )

    # ------------------------------------------------------------------ ack / change
    def ack(self, group: str, receipt_handles: Sequence[str]) -> list[AckResult]:
        """Ack each handle: per handle ``ok`` or the code of what is wrong with it
        (``invalid_receipt_handle``, ``receipt_handle_expired``, ``receipt_handle_mismatch``).
        The good ones are stored in one append before the answer."""
        validate_group(group)
        self._ensure_loaded()
        with self._lock:
            results: list[AckResult | None] = [None] * len(receipt_handles)
            by_topic: dict[str, list[Entry]] = {}
            taken: set[tuple[str, object]] = set()
            for i, text in enumerate(receipt_handles):
                try:
                    handle, live = self._live(group, text)
                    if (handle.topic, handle.key) in taken:
                        raise ReceiptHandleExpired("the same message is acked twice in this request")
                except ReceiptHandleExpired as exc:
                    acked = self._acked_before(group, text)
                    results[i] = AckResult(
                        text, acked, None if acked else exc.code, "" if acked else str(exc)
                    )
                    continue
                except PopError as exc:
                    results[i] = AckResult(text, False, exc.code, str(exc))
                    continue
                taken.add((handle.topic, handle.key))
                by_topic.setdefault(handle.topic, []).append(live)
                results[i] = AckResult(text, True)
            now = self.store.now_ms()
            self._commit(
                [StateRecord(Kind.ACK, now, group, t, entries=tuple(e)) for t, e in by_topic.items()]
            )
        if by_topic:
            self.wake()  # a FIFO group's next message may be free now
        return [r for r in results if r is not None]

    def _acked_before(self, group: str, text: str) -> bool:
        """True when ``text`` names a delivery that was acked: an ack retried after its answer
        was lost is answered ok again (idempotent), not expired."""
        handle = decode_handle(text, self.table.secret)
        return self.table.was_acked(group, handle.topic, handle.key, handle.generation)

    def change_invisible(self, group: str, receipt_handle: str, invisible_ms: int) -> Received:
        """Make the message invisible for ``invisible_ms`` from now; the answer carries the new
        handle and the old one stops working. Raises the handle's error."""
        validate_group(group)
        self._check_invisible(invisible_ms)
        self._ensure_loaded()
        with self._lock:
            handle, live = self._live(group, receipt_handle)
            now = self.store.now_ms()
            new = Entry(
                live.source,
                live.queue_id,
                live.queue_offset,
                live.attempt,
                self._picker.new_generation(),
                now + invisible_ms,
                live.popped_at_ms,
            )
            view = self._view(group, handle.topic, new)
            self._commit([StateRecord(Kind.CHANGE, now, group, handle.topic, entries=(new,))])
            text = encode_handle(self._handle(group, handle.topic, new), self.table.secret)
            return Received(view, text, new.attempt, new.visible_at_ms)

    def dead_letter(self, group: str, receipt_handle: str) -> None:
        """Put the message to ``%DLQ%group`` now, as expiry does after the last attempt, and
        end its delivery (a client that gave up on it: RocketMQ 5's
        ForwardMessageToDeadLetterQueue). The copy and the DEAD record are one append. Raises
        the handle's error."""
        validate_group(group)
        self._ensure_loaded()
        with self._lock:
            handle, live = self._live(group, receipt_handle)
            view = self._view(group, handle.topic, live)
            raw = self.store.read_record(view.commitlog_offset)
            if raw is None:
                raise ReceiptHandleExpired("the message is no longer stored")
            target = dlq_topic(group)
            if not self.store.has_topic(target):
                self.store.create_topic(target, 1)  # RocketMQ creates a DLQ topic with one queue
            copy = dead_letter_record(raw, group=group, reconsume_times=live.attempt)
            now = self.store.now_ms()
            self._commit([StateRecord(Kind.DEAD, now, group, handle.topic, entries=(live,))], [copy])
            self._dead_letters[group] += 1
        self.wake()

    def _view(self, group: str, topic: str, entry: Entry) -> MessageView:
        view = read_one(
            self.store, source_topic(group, topic, entry.source), entry.queue_id, entry.queue_offset
        )
        if view is None:
            raise ReceiptHandleExpired("the message is no longer stored")
        return view

    def _live(self, group: str, text: str) -> tuple[ReceiptHandle, Entry]:
        """The handle and its message's current in-flight entry, or the handle's error."""
        if not isinstance(text, str):
            raise InvalidReceiptHandle("a receipt handle is a string")
        handle = decode_handle(text, self.table.secret)
        if handle.group != group:
            raise ReceiptHandleMismatch(
                f"the receipt handle was issued to group {handle.group!r}, not {group!r}"
            )
        lane = self.table.lanes.get((group, handle.topic))
        live = None if lane is None else lane.inflight.get(handle.key)
        if live is None or live.generation != handle.generation:
            raise ReceiptHandleExpired(
                "the receipt handle is no longer valid: the message was acked, redelivered, dead "
                "lettered or its invisible time changed (use the newest handle)"
            )
        return handle, live

    # ------------------------------------------------------------------ expiry, stats
    def run_due(self) -> int | None:
        """Dead-letter what used its attempts, snapshot when due, wake long polls when a
        message is visible again; returns the next visible-at (ms) of any in-flight message."""
        if not self.table.secret:
            return None  # a replica: nothing of its own to expire
        with self._lock:
            now = self.store.now_ms()
            records, copies = dead_letters(self.store, self.table, now)
            if records:
                self._commit(records, copies)
                for record in records:
                    self._dead_letters[record.group] += len(record.entries)
            if self._log.since_snapshot >= self.config.snapshot_every_records:
                self._log.write_snapshot(self.table, now)
            dues = [d for lane in self.table.lanes.values() if (d := lane.next_visible_at()) is not None]
        next_due = min(dues, default=None)
        if next_due is not None and next_due <= now:
            self.wake()
        return next_due

    def snapshot(self) -> None:
        """Write a snapshot now: at a clean shutdown (before :meth:`close`), so the next open
        replays nothing. ``close`` does not, so a crash test closes as a crash would."""
        with self._lock:
            self._log.write_snapshot(self.table, self.store.now_ms())

    @property
    def expiry_error(self) -> str | None:
        """The expiry thread's last failure while it persists (for /healthz), else None."""
        return None if self._expiry is None else self._expiry.last_error

    def groups(self) -> list[str]:
        """Every POP group of this store (it received or was configured here), sorted; none on
        a replica, whose table is not loaded."""
        with self._lock:
            return sorted({*self.table.settings, *(group for group, _ in self.table.lanes)})

    def all_stats(self) -> list[GroupStats]:
        """:meth:`stats` of every POP group, sorted by group (the group lists show them)."""
        return [self.stats(group) for group in self.groups()]

    def stats(self, group: str) -> GroupStats:
        """What ``group`` has in flight now (ages in ms from the store's clock) and its
        counters since this service opened."""
        now = self.store.now_ms()
        with self._lock:
            lanes = [(t, lane) for (g, t), lane in self.table.lanes.items() if g == group]
            entries = [e for _, lane in lanes for e in lane.inflight.values()]
        oldest = min((e.popped_at_ms for e in entries), default=now)
        return GroupStats(
            group,
            len(entries),
            sum(1 for e in entries if e.visible_at_ms <= now),
            max(0, now - oldest),
            self._redeliveries[group],
            self._dead_letters[group],
            tuple(sorted(t for t, _ in lanes)),
        )

    # ------------------------------------------------------------------ plumbing
    def _commit(self, records: Sequence[StateRecord], copies: Sequence[RecordFields] = ()) -> None:
        if not records:
            return
        self._log.append(records, copies)
        for record in records:
            self.table.apply(record)

    def wake(self, topic: str = "") -> None:
        """Send the long polls of ``topic`` (every long poll: "") back to the store."""
        with self._wake:
            self._wake_seqs[topic] += 1
            self._wake.notify_all()
            listeners = tuple(self._wake_listeners)
        for listener in listeners:
            listener(topic)

    def add_wake_listener(self, listener: Callable[[str], None]) -> None:
        """``listener(topic)`` on every wake-up (an arrival on ``topic``, "" for an ack, an
        expiry or close), from any thread; it must not block."""
        with self._wake:
            self._wake_listeners.append(listener)

    def remove_wake_listener(self, listener: Callable[[str], None]) -> None:
        with self._wake:
            if listener in self._wake_listeners:
                self._wake_listeners.remove(listener)

    @property
    def closed(self) -> bool:
        return self._closed

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if topic != POP_STATE_TOPIC:
            self.wake(topic)
