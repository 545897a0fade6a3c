"""Forwarded single produces, coalesced into batches per owner and topic.

A single produce whose queue another broker owns costs a whole HTTP round trip to that broker.
Under load, many arrive at once: they wait here a few event-loop turns (no timer, as
:mod:`broker.coalescer` does for local writes), and every one queued for the same owner
and topic goes in one ``messages:batch`` request. The owner stores the batch atomically and
answers per message; each waiting request gets its own result. If the batch is refused for a
request fault (4xx: one entry's bad queue or body, nothing stored), its messages are sent again
one by one, so each request gets its own outcome, never another request's error. A refusal of
the owner's (5xx: restarting, not the master, or a replicated write appended but not
acknowledged, ``FLUSH_SLAVE_TIMEOUT``) is every request's answer: sending the messages again
would store twice what the owner's log may already hold.

Only plain messages are coalesced: an idempotent or transactional produce is its own request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from broker.errors import error_answer
from broker.peers import PeerClient, PeerUnavailable
from cluster import ClusterView

#: Most messages forwarded in one batch.
MAX_GROUP = 1000
#: Event-loop turns a group waits for company before it is sent.
GATHER_TURNS = 4

_DECODE = msgspec.json.Decoder()
_ENCODE = msgspec.json.Encoder()

#: ``(status, JSON body)`` of one forwarded produce.
Answer = tuple[int, bytes]


@dataclass
class _Group:
    entries: list[bytes] = field(default_factory=list)
    waiters: list[asyncio.Future[Answer]] = field(default_factory=list)


class ForwardCoalescer:
    """Batches forwarded single produces per (owner, topic, credentials)."""

    def __init__(self, peers: PeerClient) -> None:
        self._peers = peers
        self._pending: dict[tuple[str, str, str], _Group] = {}
        self._draining: set[tuple[str, str, str]] = set()

    async def produce(
        self, view: ClusterView, owner: str, topic: str, entry: bytes, headers: Mapping[str, str]
    ) -> Answer:
        """Forward one JSON entry (queue resolved) to ``owner``; its own ``(status, body)``."""
        credentials = headers.get("authorization", "")
        key = (owner, topic, credentials)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        group = self._pending.setdefault(key, _Group())
        group.entries.append(entry)
        group.waiters.append(waiter)
        if key not in self._draining:
            self._draining.add(key)
            asyncio.get_running_loop().create_task(self._drain(key, view, headers))
        return await waiter

    async def _drain(self, key: tuple[str, str, str], view: ClusterView, headers: Mapping[str, str]) -> None:
        try:
            for _ in range(GATHER_TURNS):
                await asyncio.sleep(0)
            while (group := self._pending.pop(key, None)) is not None:
                while group.entries:
                    entries, waiters = group.entries[:MAX_GROUP], group.waiters[:MAX_GROUP]
                    del group.entries[:MAX_GROUP], group.waiters[:MAX_GROUP]
                    await self._send(key, view, headers, entries, waiters)
        finally:
            self._draining.discard(key)

    async def _send(
        self,
        key: tuple[str, str, str],
        view: ClusterView,
        headers: Mapping[str, str],
        entries: list[bytes],
        waiters: list[asyncio.Future[Answer]],
    ) -> None:
        owner, topic, credentials = key
        sent = {"content-type": "application/json"}
        if credentials:
            sent["authorization"] = credentials
        try:
            if len(entries) == 1:
                answer = await self._peers.request(
                    view.master_of(owner),
                    owner,
                    "POST",
                    f"/topics/{topic}/messages",
                    headers=sent,
                    content=entries[0],
                )
                _settle(waiters[0], (answer.status_code, answer.content))
                return
            body = b'{"messages":[' + b",".join(entries) + b"]}"
            answer = await self._peers.request(
                view.master_of(owner),
                owner,
                "POST",
                f"/topics/{topic}/messages:batch",
                headers=sent,
                content=body,
            )
        except PeerUnavailable as exc:
            failure = error_answer(exc)
            for waiter in waiters:
                _settle(waiter, failure)
            return
        except BaseException as exc:  # a bug or cancellation: every waiter learns of it
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            raise
        if answer.status_code == 201:
            results = _DECODE.decode(answer.content)["results"]
            for waiter, result in zip(waiters, results, strict=True):
                _settle(waiter, (201, _ENCODE.encode(result)))
            return
        if not 400 <= answer.status_code < 500:  # the owner's refusal, maybe after the append
            for waiter in waiters:
                _settle(waiter, (answer.status_code, answer.content))
            return
        # a request fault, nothing stored: each message again on its own, for its own outcome
        await asyncio.gather(
            *(
                self._send(key, view, headers, [entry], [waiter])
                for entry, waiter in zip(entries, waiters, strict=True)
            )
        )


def _settle(waiter: asyncio.Future[Answer], answer: Answer) -> None:
    if not waiter.done():
        waiter.set_result(answer)
