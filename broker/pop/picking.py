"""What one receive hands out: a plan computed from the table and the store, changing neither.

Order of a receive (``max_messages`` at most):

1. **Redeliveries**: in-flight messages of the (group, topic) whose invisible time has passed,
   earliest first, each with attempt + 1 (a message that has used all its attempts is left to
   the expiry service, which dead-letters it).
2. **New messages**, queue by queue from each queue's cursor: the topic's queues on this store,
   starting at a round-robin position, and the group's retry topic ``%RETRY%group`` (messages
   whose ``RETRY_TOPIC`` is this topic, e.g. sent back by an offset-based consumer before the
   group moved to POP). The retry topic goes first on one receive in five (RocketMQ's
   ``popFromRetryProbability`` of 20 %), last otherwise. A queue never touched starts at its
   oldest stored message (or its newest, per group setting).
3. **FIFO groups**: at most one message per message group (``__SHARDINGKEY``) is in flight.
   A queue's scan stops at the first message whose group is blocked, and its cursor stays
   there, so nothing behind it is skipped: order per message group is the queue order.
   Messages without a message group are not blocked. FIFO groups do not read the retry topic.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, field

from broker.pop.state_codec import Cursor, Entry, GroupSettings, Source
from broker.pop.table import Key, Lane
from store import GetStatus, MessageStore, MessageView, parse_tag_expression, retry_topic

SHARDING_KEY = "__SHARDINGKEY"
RETRY_TOPIC_PROPERTY = "RETRY_TOPIC"
#: One receive in this many reads the retry topic first.
RETRY_FIRST_EVERY = 5


@dataclass(frozen=True, slots=True)
class Pick:
    entry: Entry
    view: MessageView


@dataclass
class Plan:
    picks: list[Pick] = field(default_factory=list)
    cursors: list[Cursor] = field(default_factory=list)
    #: In-flight messages whose bytes are gone from the store (retention): dropped.
    gone: list[Entry] = field(default_factory=list)
    #: Sharding keys learnt for in-flight entries (FIFO), to remember in the lane.
    sharding_keys: dict[Key, str | None] = field(default_factory=dict)


def source_topic(group: str, topic: str, source: Source) -> str:
    return topic if source is Source.TOPIC else retry_topic(group)


def read_one(store: MessageStore, topic: str, queue_id: int, offset: int) -> MessageView | None:
    """The message at (topic, queue, offset), None when it is no longer stored."""
    if not store.has_topic(topic) or offset < store.min_offset(topic, queue_id):
        return None
    got = store.get_messages(topic, queue_id, offset, 1)
    if got.messages and got.messages[0].queue_offset == offset:
        return got.messages[0]
    return None


@dataclass
class Request:
    group: str
    topic: str
    max_messages: int
    invisible_ms: int
    tag_expression: str | None
    now_ms: int
    round_robin: int


class Picker:
    """Plans receives over one store (reads only)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        # Generations need to be unique, not secret (the handle's mac guards against forgery):
        # a seeded PRNG, ten times cheaper than a system call per delivery.
        self._generations = random.Random(secrets.randbits(128))

    def new_generation(self) -> int:
        return self._generations.getrandbits(64)

    def plan(self, req: Request, lane: Lane, settings: GroupSettings) -> Plan:
        plan = Plan()
        tags = parse_tag_expression(req.tag_expression)
        blocked = self._blocked_keys(req, lane, plan) if settings.fifo else set()
        for entry in lane.visible(req.now_ms):
            if len(plan.picks) >= req.max_messages:
                return plan
            if entry.attempt > settings.max_retries:
                continue  # the expiry service dead-letters it
            view = read_one(self.store, source_topic(req.group, req.topic, entry.source), *entry.key[1:])
            if view is None:
                plan.gone.append(entry)
            elif tags.matches(view.tags):
                plan.picks.append(Pick(self._delivery(req, entry.key, entry.attempt + 1), view))
        for source, queue_id in self._queues(req, settings):
            if len(plan.picks) >= req.max_messages:
                break
            self._scan_queue(req, lane, settings, source, queue_id, plan, blocked)
        return plan

    def _delivery(self, req: Request, key: Key, attempt: int) -> Entry:
        source, queue_id, offset = key
        generation = self.new_generation()
        return Entry(source, queue_id, offset, attempt, generation, req.now_ms + req.invisible_ms, req.now_ms)

    def _blocked_keys(self, req: Request, lane: Lane, plan: Plan) -> set[str]:
        blocked: set[str] = set()
        for key in lane.inflight:
            if key in lane.sharding_keys:
                sharding_key = lane.sharding_keys[key]
            else:
                view = read_one(self.store, source_topic(req.group, req.topic, key[0]), key[1], key[2])
                sharding_key = None if view is None else view.properties.get(SHARDING_KEY)
                plan.sharding_keys[key] = sharding_key
            if sharding_key:
                blocked.add(sharding_key)
        return blocked

    def _queues(self, req: Request, settings: GroupSettings) -> list[tuple[Source, int]]:
        count = self.store.queue_count(req.topic)  # UnknownTopic for a topic never created
        start = req.round_robin % count
        own = [(Source.TOPIC, (start + i) % count) for i in range(count)]
        retry = retry_topic(req.group)
        if settings.fifo or not self.store.has_topic(retry):
            return own
        retries = [(Source.RETRY, q) for q in range(self.store.queue_count(retry))]
        return retries + own if req.round_robin % RETRY_FIRST_EVERY == 0 else own + retries

    def _scan_queue(
        self,
        req: Request,
        lane: Lane,
        settings: GroupSettings,
        source: Source,
        queue_id: int,
        plan: Plan,
        blocked: set[str],
    ) -> None:
        topic = source_topic(req.group, req.topic, source)
        known = lane.cursors.get((source, queue_id))
        offset = known
        if offset is None:
            newest = settings.start_newest and source is Source.TOPIC
            offset = (self.store.max_offset if newest else self.store.min_offset)(topic, queue_id)
        want = req.max_messages - len(plan.picks)
        got = self.store.get_messages(topic, queue_id, offset, want, req.tag_expression)
        if got.status is GetStatus.OFFSET_TOO_SMALL:
            offset = got.next_offset
            got = self.store.get_messages(topic, queue_id, offset, want, req.tag_expression)
        cursor = got.next_offset if got.status is not GetStatus.NO_MATCHED_LOGIC_QUEUE else offset
        for view in got.messages:
            if source is Source.RETRY and view.properties.get(RETRY_TOPIC_PROPERTY) != req.topic:
                continue
            sharding_key = view.properties.get(SHARDING_KEY) if settings.fifo else None
            if sharding_key and sharding_key in blocked:
                cursor = view.queue_offset
                break
            if sharding_key:
                blocked.add(sharding_key)
            entry = self._delivery(req, (source, queue_id, view.queue_offset), view.reconsume_times + 1)
            plan.picks.append(Pick(entry, view))
            plan.sharding_keys[entry.key] = sharding_key
            if len(plan.picks) >= req.max_messages:
                cursor = view.queue_offset + 1
                break
        if cursor != known:
            plan.cursors.append(Cursor(source, queue_id, cursor))
