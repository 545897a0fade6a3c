"""The in-memory POP table: the fold of the state records (pure: no I/O, no clock, no locks).

Per (group, topic), a :class:`Lane`:

* ``cursors``: (source, queue id) -> the next queue offset never handed out ("next to pop");
* ``inflight``: (source, queue id, queue offset) -> its current :class:`Entry` (attempt,
  generation, visible-at); a message stays here from its first delivery until it is acked or
  dead lettered, redeliveries included (it is redelivered in place: see docs/pop.md);
* ``due``: a heap of (visible-at, generation, key) over ``inflight``, stale items skipped
  lazily, so "what is deliverable again" and "when is the next expiry" cost O(log n);
* ``sharding_keys``: the message group (``__SHARDINGKEY``) of in-flight messages of a FIFO
  group, learnt at delivery (after a replay the service reads them back lazily).

The service changes the table only by :meth:`PopTable.apply` of a record it has appended to the
state topic, and replay applies the same records: live state and recovered state are one fold.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from broker.pop.state_codec import (
    Cursor,
    Entry,
    GroupSettings,
    Kind,
    Source,
    StateRecord,
    StateRecordCorrupt,
    read_snapshot_mark,
)

Key = tuple[Source, int, int]
#: (group, topic, key, generation) of one delivery that was acked.
AckedDelivery = tuple[str, str, Key, int]
#: How many acked deliveries the table remembers, so that an ack retried after its answer was
#: lost (a killed master, a dropped connection) is answered ok again rather than "expired".
RECENT_ACKS = 65_536


@dataclass
class Lane:
    """One (group, topic)'s cursors and in-flight messages."""

    cursors: dict[tuple[Source, int], int] = field(default_factory=dict)
    inflight: dict[Key, Entry] = field(default_factory=dict)
    due: list[tuple[int, int, Key]] = field(default_factory=list)
    sharding_keys: dict[Key, str | None] = field(default_factory=dict)

    def put(self, entry: Entry) -> None:
        self.inflight[entry.key] = entry
        heapq.heappush(self.due, (entry.visible_at_ms, entry.generation, entry.key))
        if len(self.due) > 2 * len(self.inflight) + 64:  # drop the stale items (amortised O(1))
            self.due = [(e.visible_at_ms, e.generation, e.key) for e in self.inflight.values()]
            heapq.heapify(self.due)

    def remove(self, key: Key) -> Entry | None:
        self.sharding_keys.pop(key, None)
        return self.inflight.pop(key, None)

    def _top(self) -> tuple[int, int, Key] | None:
        while self.due:
            _, generation, key = self.due[0]
            live = self.inflight.get(key)
            if live is not None and live.generation == generation:
                return self.due[0]
            heapq.heappop(self.due)
        return None

    def next_visible_at(self) -> int | None:
        """The earliest visible-at of an in-flight message (None when nothing is in flight)."""
        top = self._top()
        return None if top is None else top[0]

    def visible(self, now_ms: int) -> Iterator[Entry]:
        """In-flight messages whose invisible time has passed, earliest first (a snapshot of the
        heap: safe to change the lane while iterating)."""
        ready, stack, due = [], [0], self.due
        while stack:  # the heap's nodes due by now: a parent is never later than its children
            i = stack.pop()
            if i < len(due) and due[i][0] <= now_ms:
                ready.append(due[i])
                stack += (2 * i + 1, 2 * i + 2)
        ready.sort(key=lambda item: (item[0], item[2]))
        for _, generation, key in ready:
            live = self.inflight.get(key)
            if live is not None and live.generation == generation:
                yield live


@dataclass
class PopTable:
    """Every POP group's settings and lanes, and the secret receipt handles are signed with."""

    secret: bytes = b""
    settings: dict[str, GroupSettings] = field(default_factory=dict)
    lanes: dict[tuple[str, str], Lane] = field(default_factory=dict)
    #: The newest acked deliveries (bounded, oldest dropped first; not in snapshots: an ack
    #: retried across a snapshot and a restart is answered expired, the rare case).
    recent_acks: OrderedDict[AckedDelivery, None] = field(default_factory=OrderedDict)

    def was_acked(self, group: str, topic: str, key: Key, generation: int) -> bool:
        """True when this very delivery (its generation) was acked."""
        return (group, topic, key, generation) in self.recent_acks

    def lane(self, group: str, topic: str) -> Lane:
        return self.lanes.setdefault((group, topic), Lane())

    def group_settings(self, group: str) -> GroupSettings:
        return self.settings.get(group, GroupSettings())

    def is_pop_group(self, group: str) -> bool:
        return group in self.settings or any(g == group for g, _ in self.lanes)

    def apply(self, record: StateRecord) -> None:
        """Fold one state record in (records of a snapshot reset the table at BEGIN)."""
        kind = record.kind
        if kind is Kind.SNAPSHOT_BEGIN:
            _, _, secret = read_snapshot_mark(record.tail)
            self.secret, self.settings, self.lanes = secret, {}, {}
            return
        if kind is Kind.SNAPSHOT_END:
            return
        if kind is Kind.CONFIG:
            self.settings[record.group] = GroupSettings.decode(record.tail)
            return
        if kind is Kind.SNAPSHOT_PART and record.tail:
            self.settings[record.group] = GroupSettings.decode(record.tail)
        lane = self.lane(record.group, record.topic)
        for cursor in record.cursors:
            lane.cursors[(cursor.source, cursor.queue_id)] = cursor.next_offset
        if kind in (Kind.RECEIVE, Kind.CHANGE, Kind.SNAPSHOT_PART):
            for entry in record.entries:
                lane.put(entry)
        elif kind in (Kind.ACK, Kind.DEAD):
            for entry in record.entries:
                lane.remove(entry.key)
                if kind is Kind.ACK:
                    self.recent_acks[(record.group, record.topic, entry.key, entry.generation)] = None
            while len(self.recent_acks) > RECENT_ACKS:
                self.recent_acks.popitem(last=False)
        else:  # pragma: no cover - every Kind is handled above
            raise StateRecordCorrupt(f"unknown kind {kind}")

    def snapshot_parts(self, time_ms: int, max_entries: int) -> Iterator[StateRecord]:
        """SNAPSHOT_PART records holding the whole table (settings of groups without a lane
        included), each with at most ``max_entries`` entries."""
        lane_groups = {group for group, _ in self.lanes}
        for group, settings in self.settings.items():
            if group not in lane_groups:
                yield StateRecord(Kind.CONFIG, time_ms, group, tail=settings.encode())
        for (group, topic), lane in self.lanes.items():
            tail = self.settings[group].encode() if group in self.settings else b""
            cursors = tuple(Cursor(s, q, o) for (s, q), o in sorted(lane.cursors.items()))
            entries = list(lane.inflight.values())
            first = True
            while first or entries:
                chunk, entries = entries[:max_entries], entries[max_entries:]
                yield StateRecord(
                    Kind.SNAPSHOT_PART,
                    time_ms,
                    group,
                    topic,
                    cursors if first else (),
                    tuple(chunk),
                    tail,
                )
                first = False
