"""A consumer of one topic: every queue pulled from its owner, offsets tracked, commits per owner.

Positions are next-to-consume offsets per queue; a message counts as consumed once
:meth:`Consumer.poll` has returned it, and :meth:`Consumer.commit` writes the positions of a
``group`` to each queue's owner (``PUT /groups/{g}/offsets``). Commit after processing for
at-least-once.

Fetching: each queue has at most one pull in flight, run on a small thread pool, so a
long-poll (``wait_ms``) waits on every queue at once and returns as soon as any has messages.
Pulls still in flight when ``poll`` returns keep going; their messages are delivered by the
next ``poll`` (a ``seek`` discards them). Messages beyond ``max_messages`` wait in a buffer.

Faults: a queue whose owner does not answer (or whose route moved) is retried with a backoff
after refetching the route, and listed in :attr:`Consumer.unavailable` meanwhile; the other
queues keep flowing. Queues added to the topic are picked up when the route is refreshed
(every ``route_ttl_ms``, or at a miss) and start at the group's committed offset, else at
their beginning. A fault that retrying cannot cure (an unknown topic, a refused token) is
raised by ``poll``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Literal

from sparkmq.client.config import RetryPolicy
from sparkmq.client.errors import ClientError, InvalidArgument
from sparkmq.client.messages import PullResult, ReceivedMessage
from sparkmq.client.owners import Owners
from sparkmq.client.routes import TopicRoute

#: Where a consumer starts: the group's committed offsets (earliest where none), the first
#: retained message, the end, or explicit offsets per queue.
Start = Literal["committed", "earliest", "latest"] | Mapping[int, int]
#: Longest long-poll the broker accepts, in ms.
MAX_WAIT_MS = 60_000
#: Most messages one pull asks for.
PULL_CHUNK = 1000


@dataclass
class _Queue:
    """The consumer's state of one queue."""

    position: int
    buffer: deque[ReceivedMessage] = field(default_factory=deque)
    #: next_offset of the last pull, applied once the buffer is drained (tag filters skip).
    pending_next: int = 0
    max_offset: int | None = None
    inflight: Future[PullResult] | None = None
    #: Bumped by a seek; a pull launched under an older generation is discarded.
    generation: int = 0
    inflight_generation: int = 0
    paused: bool = False
    failures: int = 0
    retry_at: float = 0.0
    owner_dead: bool = False


def _at_end(state: _Queue) -> bool:
    """Nothing fetched or in flight, and the position at the end the queue last showed."""
    if state.inflight is not None or state.buffer or state.max_offset is None:
        return False
    return state.position >= state.max_offset


class Consumer:
    """Reads one topic's queues (all, or ``queues``). Not thread-safe: one thread polls.

    Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        owners: Owners,
        topic: str,
        *,
        group: str | None = None,
        queues: Iterable[int] | None = None,
        start: Start = "committed",
        tags: str | None = None,
        retry: RetryPolicy | None = None,
        max_parallel_pulls: int = 16,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.topic = topic
        self.group = group
        self.tags = tags
        self._owners = owners
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._fixed = None if queues is None else sorted(set(queues))
        self._route = owners.route(topic)
        self._queues: dict[int, _Queue] = {}
        self._committed: dict[int, int] = {}
        self._turn = 0
        self._pool = ThreadPoolExecutor(max_workers=max_parallel_pulls, thread_name_prefix=f"pull-{topic}")
        self._assign(self._wanted(self._route), start)

    # -- assignment and positions -----------------------------------------------------------------

    def _wanted(self, route: TopicRoute) -> list[int]:
        if self._fixed is None:
            return list(range(route.queue_count))
        outside = [q for q in self._fixed if q >= route.queue_count]
        if outside:
            raise InvalidArgument(
                f"topic {self.topic!r} has {route.queue_count} queues; there is no queue {outside[0]}"
            )
        return self._fixed

    def _assign(self, queue_ids: list[int], start: Start) -> None:
        """Start positions of new queues (one request per owner, not per queue)."""
        if not queue_ids:
            return
        if isinstance(start, Mapping):
            explicit = dict(start)
            positions = {q: int(explicit.get(q, 0)) for q in queue_ids}
        else:
            bounds = {row.queue_id: row for row in self._owners.bounds(self._route)}
            committed = (
                self._owners.committed(self._route, self.group)
                if start == "committed" and self.group is not None
                else {}
            )
            positions = {}
            for q in queue_ids:
                low, high = bounds[q].min_offset or 0, bounds[q].max_offset or 0
                if start == "latest":
                    positions[q] = high
                elif committed.get(q, -1) >= 0:
                    positions[q] = max(committed[q], low)
                else:
                    positions[q] = low
            self._committed.update({q: c for q, c in committed.items() if q in positions})
        for q, position in positions.items():
            self._queues[q] = _Queue(position=position, pending_next=position)

    @property
    def queues(self) -> list[int]:
        """The queue ids this consumer reads."""
        return sorted(self._queues)

    @property
    def positions(self) -> dict[int, int]:
        """Next offset to consume, per queue (what :meth:`commit` writes)."""
        return {q: s.position for q, s in sorted(self._queues.items())}

    @property
    def unavailable(self) -> dict[int, str]:
        """Queues whose last pull failed, and their owner (retried with a backoff)."""
        return {q: self._route.owner(q) for q, s in sorted(self._queues.items()) if s.failures}

    @property
    def caught_up(self) -> bool:
        """Every queue read to its end as last seen (queues of dead owners aside)."""
        return all(s.paused or s.owner_dead or _at_end(s) for s in self._queues.values())

    def seek(self, queue_id: int, offset: int) -> None:
        """Consume ``queue_id`` from ``offset`` next (discards what was fetched beyond it)."""
        state = self._queues[queue_id]
        state.generation += 1
        state.buffer.clear()
        state.position = state.pending_next = offset
        state.max_offset = None

    def pause(self, queue_id: int) -> None:
        """Stop reading ``queue_id`` (its position stays; fetched messages are dropped)."""
        state = self._queues[queue_id]
        state.paused = True
        self.seek(queue_id, state.position)

    def resume(self, queue_id: int) -> None:
        self._queues[queue_id].paused = False

    # -- polling ----------------------------------------------------------------------------------

    def poll(self, max_messages: int = PULL_CHUNK, wait_ms: int = 0) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, waiting up to ``wait_ms`` for the first (a long-poll
        on every queue at once). An empty list when none came in time."""
        if max_messages <= 0:
            raise InvalidArgument(f"max_messages must be positive, got {max_messages}")
        end = self._clock() + min(max(wait_ms, 0), MAX_WAIT_MS) / 1000
        self._follow_route()
        tried: set[int] = set()
        while True:
            self._harvest()
            out = self._drain(max_messages)
            if out:
                return out
            left_s = max(0.0, end - self._clock())
            tried |= self._launch(int(left_s * 1000), tried)
            pending = {q: s.inflight for q, s in self._queues.items() if s.inflight is not None}
            if not pending:
                waiting = [s.retry_at for q, s in self._queues.items() if s.failures and q not in tried]
                if left_s <= 0 or not waiting:
                    return []
                self._sleep(min(left_s, max(0.0, min(waiting) - self._clock())) or 0.001)
                continue
            fresh = any(q in tried for q in pending)
            done, _ = wait(list(pending.values()), timeout=left_s + (1.0 if fresh else 0.0),
                           return_when=FIRST_COMPLETED)  # fmt: skip
            if not done:
                return []

    def _launch(self, wait_ms: int, tried: set[int]) -> set[int]:
        """A pull for each idle queue not yet tried in this poll; the queues launched."""
        now = self._clock()
        launched = set()
        for q, state in self._queues.items():
            if state.paused or state.inflight is not None or state.buffer or q in tried:
                continue
            if state.failures and state.retry_at > now:
                continue
            state.inflight = self._pool.submit(
                self._owners.pull, self._route, q, state.position,
                max_messages=PULL_CHUNK, wait_ms=wait_ms, tags=self.tags,
            )  # fmt: skip
            state.inflight_generation = state.generation
            launched.add(q)
        return launched

    def _harvest(self) -> None:
        for q, state in self._queues.items():
            future = state.inflight
            if future is None or not future.done():
                continue
            state.inflight = None
            if state.inflight_generation != state.generation:
                continue  # fetched before a seek
            failure = future.exception()
            if failure is None:
                self._received(state, future.result())
            elif isinstance(failure, ClientError) and failure.retriable:
                self._failed(q, state)
            else:
                raise failure

    def _received(self, state: _Queue, result: PullResult) -> None:
        state.failures = 0
        state.owner_dead = False
        state.max_offset = result.max_offset
        state.buffer.extend(m for m in result.messages if m.queue_offset >= state.position)
        state.pending_next = result.next_offset
        if not state.buffer:
            state.position = result.next_offset

    def _failed(self, queue_id: int, state: _Queue) -> None:
        state.failures += 1
        state.retry_at = self._clock() + self._retry.backoff_s(state.failures)
        self._owners.directory.invalidate(self.topic)
        try:
            self._route = self._owners.route(self.topic, refresh=True)
        except ClientError:
            return
        state.owner_dead = not self._route.alive(self._route.owner(queue_id))

    def _drain(self, max_messages: int) -> list[ReceivedMessage]:
        """Buffered messages, queue by queue from a rotating start; positions advance."""
        out: list[ReceivedMessage] = []
        order = sorted(self._queues)
        if not order:
            return out
        self._turn = (self._turn + 1) % len(order)
        for q in order[self._turn :] + order[: self._turn]:
            state = self._queues[q]
            while state.buffer and len(out) < max_messages:
                message = state.buffer.popleft()
                out.append(message)
                state.position = message.queue_offset + 1
            if not state.buffer:
                state.position = max(state.position, state.pending_next)
        return out

    def _follow_route(self) -> None:
        """Pick up queues added to the topic (the cached route expires every ``route_ttl_ms``)."""
        route = self._owners.directory.route(self.topic)
        if route is None:
            return
        self._route = route
        if self._fixed is None and route.queue_count > len(self._queues):
            self._assign([q for q in range(route.queue_count) if q not in self._queues], "committed")

    # -- committing -------------------------------------------------------------------------------

    def commit(self) -> dict[int, int]:
        """Write the group's positions that moved since the last commit, at each queue's owner;
        returns what was committed. Raises the fault of a broker that could not take its part
        (the other brokers' parts are committed)."""
        if self.group is None:
            raise InvalidArgument("commit needs a consumer group (Client.consumer(topic, group=...))")
        moved = {q: s.position for q, s in self._queues.items() if self._committed.get(q) != s.position}
        if not moved:
            return {}
        failed = self._owners.commit(self._route, self.group, moved)
        done = {q: o for q, o in moved.items() if self._route.owner(q) not in failed}
        self._committed.update(done)
        if failed:
            raise next(iter(failed.values()))
        return done

    def close(self) -> None:
        """Stop fetching (pulls in flight finish within their wait) and release the threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
