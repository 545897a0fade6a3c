"""Group commit for single-message produces.

Concurrent ``POST /topics/{t}/messages`` requests queue their message here; one worker call
stores everything queued so far with a single ``put_messages`` (one lock, one append, one
fsync under SYNC_FLUSH), then the next group goes. Before a group is taken the drainer
yields to the event loop for :data:`GATHER_TURNS` turns, so requests whose bytes have already
arrived join it (fewer, larger store calls and thread hops under load); a lone request waits
only those few turns (microseconds on an idle loop), never for a timer. ``put_messages`` is
all-or-nothing before the append: when a group is refused for one message's fault (a bad queue,
a body too large) nothing was stored, and the messages are stored again one by one so that each
request gets its own outcome. Any other refusal is the whole group's (the store is closed or not
writable; a replicated write appended but not acknowledged, ``FLUSH_SLAVE_TIMEOUT``): storing
the messages again would store twice what the log already holds, so every request gets it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from broker.threads import run_blocking
from store import InvalidArgument, Message, PutResult, SparkMQError, UnknownTopic

if TYPE_CHECKING:
    from store import MessageStore

#: Most messages stored by one call.
MAX_GROUP = 1024
#: Event-loop turns a group waits for company before it is stored.
GATHER_TURNS = 4

Outcome = PutResult | SparkMQError
#: Refusals of a group for one message's own fault, raised before anything is appended.
MESSAGE_FAULTS = (InvalidArgument, UnknownTopic)


def store_each(store: MessageStore, messages: Sequence[Message]) -> list[Outcome]:
    """Store a group atomically, or, refused for one message's fault, message by message.
    Worker thread."""
    try:
        return list(store.put_messages(messages))
    except SparkMQError as group_error:
        if len(messages) == 1 or not isinstance(group_error, MESSAGE_FAULTS):
            return [group_error] * len(messages)  # the group's, maybe appended: never again
    outcomes: list[Outcome] = []
    for message in messages:
        try:
            outcomes.append(store.put_message(message))
        except SparkMQError as error:
            outcomes.append(error)
    return outcomes


class ProduceCoalescer:
    """Lives on the event loop; only :func:`store_each` runs in a worker thread."""

    def __init__(self, store: MessageStore) -> None:
        self._store = store
        self._pending: list[tuple[Message, asyncio.Future[PutResult]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def put(self, message: Message) -> PutResult:
        future: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self._pending.append((message, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                for _ in range(GATHER_TURNS):
                    if len(self._pending) >= MAX_GROUP:
                        break
                    await asyncio.sleep(0)  # let requests already on the loop join this group
                group, self._pending = self._pending[:MAX_GROUP], self._pending[MAX_GROUP:]
                try:
                    outcomes = await run_blocking(store_each, self._store, [m for m, _ in group])
                except BaseException as exc:  # a bug, or cancellation: every waiter must hear of it
                    for _, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    raise
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if future.done():  # the request was cancelled; the message is stored anyway
                        continue
                    if isinstance(outcome, SparkMQError):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            self._drainer = None
