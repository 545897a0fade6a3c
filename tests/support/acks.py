"""A producer that records every acknowledgement, and the checker that judges them afterwards.

:class:`AckRecorder` produces unique bodies over HTTP to each given broker URL continuously (one
thread per URL, one request at a time) and records every attempt: what was sent, where, when
(``time.monotonic()`` before sending and after the answer), the answer, and, for a 201, which
broker appended the message: the HTTP port in its offsetMsgId (``store_host`` of the broker
that wrote it, so a write a slave forwarded is credited to the master that acknowledged it).

:func:`check_exactly_once` then decides message by message against everything read back from
the surviving master: every acknowledged body present exactly once, no body present twice,
nothing present that was never sent. :func:`ack_windows` gives, per broker, the first and last
acknowledgement, to check that one broker stopped acknowledging before another began.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from store.format.ids import decode_msg_id


@dataclass(frozen=True)
class Attempt:
    """One produce request and its outcome."""

    body: str
    via: str
    #: ``time.monotonic()`` just before the request was sent (s).
    sent_s: float
    #: ``time.monotonic()`` once the answer (or the failure) came back (s).
    answered_s: float
    #: HTTP status; 0 when no answer came (timeout, connection refused or reset).
    status: int
    #: For a 201: the HTTP port of the broker that appended the message (from its msg id).
    stored_by: int | None = None
    #: The answer's text (for a refusal: the error code and message, or the transport error).
    detail: str = ""


class AckRecorder:
    """Produces to ``urls`` until :meth:`stop`; ``attempts`` is the history, in answer order."""

    def __init__(
        self, urls: Sequence[str], topic: str, queues: int, *, timeout_s: float = 10.0, pause_s: float = 0.005
    ) -> None:
        self.topic = topic
        self.queues = queues
        self.timeout_s = timeout_s
        self.pause_s = pause_s
        self.attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, args=(url, f"p{n}"), name=f"producer-{n}", daemon=True)
            for n, url in enumerate(urls)
        ]

    def start(self) -> AckRecorder:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> list[Attempt]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 5)
        return self.history()

    def history(self) -> list[Attempt]:
        with self._lock:
            return list(self.attempts)

    def acked(self, by: int | None = None, since_s: float = 0.0) -> list[Attempt]:
        """Acknowledged attempts (by the broker on HTTP port ``by``, sent after ``since_s``)."""
        return [
            a
            for a in self.history()
            if a.status == 201 and a.sent_s >= since_s and (by is None or a.stored_by == by)
        ]

    def refused(self, since_s: float = 0.0) -> list[Attempt]:
        return [a for a in self.history() if a.status != 201 and a.sent_s >= since_s]

    def _produce(self, url: str, prefix: str) -> None:
        with httpx.Client(base_url=url, timeout=self.timeout_s) as http:
            sequence = 0
            while not self._stop.is_set():
                attempt = produce_once(http, self.topic, f"{prefix}-{sequence}", sequence % self.queues)
                sequence += 1
                self._record(attempt)
                time.sleep(0.05 if attempt.status == 0 else self.pause_s)

    def _record(self, attempt: Attempt) -> None:
        with self._lock:
            self.attempts.append(attempt)


def produce_once(http: httpx.Client, topic: str, body: str, queue_id: int) -> Attempt:
    """One single produce of ``body`` through ``http`` (its base URL the broker), never
    retried, and its :class:`Attempt`."""
    url = str(http.base_url).rstrip("/")
    sent = time.monotonic()
    try:
        answer = http.post(f"/topics/{topic}/messages", json={"body": body, "queue_id": queue_id})
    except httpx.HTTPError as exc:
        return Attempt(body, url, sent, time.monotonic(), 0, detail=repr(exc))
    return _outcome(body, url, sent, answer)


def _outcome(body: str, url: str, sent: float, answer: httpx.Response) -> Attempt:
    answered = time.monotonic()
    if answer.status_code != 201:
        return Attempt(body, url, sent, answered, answer.status_code, detail=answer.text[:300])
    (_, port), _ = decode_msg_id(answer.json()["msg_id"])
    return Attempt(body, url, sent, answered, 201, stored_by=port, detail=answer.text[:300])


@dataclass(frozen=True)
class AckWindow:
    """When one broker acknowledged: the earliest send of a request it acknowledged and the
    latest answer of one (its acknowledgements all happened within)."""

    first_sent_s: float
    last_answered_s: float
    count: int


def ack_windows(attempts: Sequence[Attempt]) -> dict[int, AckWindow]:
    """Per acknowledging broker (HTTP port): the window of its acknowledgements."""
    windows: dict[int, AckWindow] = {}
    for a in attempts:
        if a.status != 201 or a.stored_by is None:
            continue
        seen = windows.get(a.stored_by)
        windows[a.stored_by] = (
            AckWindow(a.sent_s, a.answered_s, 1)
            if seen is None
            else AckWindow(
                min(seen.first_sent_s, a.sent_s), max(seen.last_answered_s, a.answered_s), seen.count + 1
            )
        )
    return windows


def read_bodies(url: str, topic: str, queues: int, *, replica: bool = False) -> list[str]:
    """Every message body of ``topic`` as the broker at ``url`` serves it, all queues from 0
    (``replica``: a slave answers from its own store, ``readFrom=replica``, up to the offset
    every in-sync member holds, instead of redirecting to its master)."""
    return [m["body"] for m in read_messages(url, topic, queues, replica=replica)]


def read_messages(url: str, topic: str, queues: int, *, replica: bool = False) -> list[dict[str, Any]]:
    """:func:`read_bodies`, each message whole as the broker serves it (queue and CommitLog
    offsets, store time, ids): what a checker shows of a duplicate."""
    messages: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=30) as http:
        for queue in range(queues):
            offset = 0
            while True:
                params: dict[str, str | int] = {"offset": offset, "max_messages": 5000}
                if replica:
                    params["readFrom"] = "replica"
                answer = http.get(f"/topics/{topic}/queues/{queue}/messages", params=params)
                assert answer.status_code == 200, answer.text
                page = answer.json()
                if not page["messages"]:
                    break
                messages += page["messages"]
                offset = page["next_offset"]
    return messages


@dataclass(frozen=True)
class Verdict:
    acknowledged: int
    lost: list[str]
    duplicated: list[str]
    unknown: list[str]

    @property
    def valid(self) -> bool:
        return not (self.lost or self.duplicated or self.unknown)


def check_exactly_once(attempts: Sequence[Attempt], bodies: Sequence[str]) -> Verdict:
    """Message by message: every acknowledged body in ``bodies`` once, none twice, none unsent.
    (A refused or unanswered request may be stored once: a refusal after the append, e.g. a
    sync replication timeout, leaves the message in the master's log unacknowledged.)"""
    counts = Counter(bodies)
    acknowledged = {a.body for a in attempts if a.status == 201}
    sent = {a.body for a in attempts}
    return Verdict(
        acknowledged=len(acknowledged),
        lost=sorted(acknowledged - counts.keys()),
        duplicated=sorted(body for body, n in counts.items() if n > 1),
        unknown=sorted(counts.keys() - sent),
    )
