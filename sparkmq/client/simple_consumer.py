"""POP consumption (competing consumers) across every broker of a cluster: ``SimpleConsumer``.

Any number of consumers share a group; each message goes to one of them and stays invisible
to the others until it is acked or its invisible time passes (then it comes back, with
``delivery_attempt`` + 1). Each broker hands out its own queues of the topic, so
:meth:`SimpleConsumer.receive` asks the brokers in turn (a round that finds nothing ends with a
long poll at one broker). A receipt handle names the broker that issued it; :meth:`ack` sends
it there (any broker forwards it, so after a failover the new master of the same broker name
answers). See docs/client.md and docs/pop.md.

    with client.simple_consumer("orders", "billing") as consumer:
        for message in consumer.receive(max_messages=32, wait_ms=5000):
            handle(message.body)
            consumer.ack([message])
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkmq.client.config import RetryPolicy
from sparkmq.client.directory import RouteDirectory
from sparkmq.client.errors import BrokerError, BrokerUnreachable, ClientError, NotFound, QueueUnavailable
from sparkmq.client.messages import ReceivedMessage
from sparkmq.client.routes import LOCAL_BROKER
from sparkmq.client.transport import Transport, segment

#: The longest single long poll of a round that found nothing, ms (then the next broker's turn).
LONG_POLL_SLICE_MS = 2_000


@dataclass(frozen=True)
class PopMessage:
    """One received message: ack it with :meth:`SimpleConsumer.ack` before ``invisible_until_ms``."""

    message: ReceivedMessage
    receipt_handle: str
    #: 1 on the first delivery, + 1 on each redelivery.
    delivery_attempt: int
    #: Epoch ms when it becomes visible to the group again unless acked.
    invisible_until_ms: int

    @property
    def body(self) -> bytes:
        return self.message.body

    @property
    def text(self) -> str | None:
        return self.message.text

    @property
    def msg_id(self) -> str:
        return self.message.msg_id

    @staticmethod
    def from_json(document: Mapping[str, Any]) -> PopMessage:
        return PopMessage(
            ReceivedMessage.from_json(document, document.get("broker")),
            str(document["receipt_handle"]),
            int(document["delivery_attempt"]),
            int(document["invisible_until_ms"]),
        )


@dataclass(frozen=True)
class AckOutcome:
    """One handle's ack: ``ok``, or the broker's ``error`` code (``receipt_handle_expired``:
    redelivered or acked since; ``invalid_receipt_handle``; ``broker_unavailable``)."""

    receipt_handle: str
    ok: bool
    error: str | None = None
    message: str | None = None


def handle_broker(receipt_handle: str) -> str | None:
    """The broker name a handle carries (``None``: a lone broker's handle)."""
    name, sep, _ = receipt_handle.rpartition("~")
    return name if sep else None


Handles = Sequence[PopMessage | str]


class SimpleConsumer:
    """Receive / ack / change invisible time for ``group`` on ``topic``. Thread-safe (the
    transport is); every method raises :class:`ClientError` subclasses."""

    def __init__(
        self,
        directory: RouteDirectory,
        transport: Transport,
        topic: str,
        group: str,
        *,
        invisible_ms: int = 30_000,
        tags: str | None = None,
        retry: RetryPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.topic = topic
        self.group = group
        self.invisible_ms = invisible_ms
        self.tags = tags
        self._directory = directory
        self._transport = transport
        self._retry = retry or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._turn = itertools.count()

    def close(self) -> None:
        """Nothing to release (the client owns the connections); here for ``with``."""

    def __enter__(self) -> SimpleConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- receive --------------------------------------------------------------------------------

    def _brokers(self) -> list[tuple[str, str]]:
        """``(name, base URL)`` of every live broker, starting at a rotating one."""
        info = self._directory.cluster()
        avoided = self._directory.avoided()
        live = [(b.name, b.http) for b in info.brokers if b.alive and b.http and b.name not in avoided]
        if not live:
            live = [(b.name, b.http) for b in info.brokers if b.http]
        if not live:
            raise QueueUnavailable("no live broker is known")
        start = next(self._turn) % len(live)
        return live[start:] + live[:start]

    def _receive_at(
        self, name: str, url: str, max_messages: int, wait_ms: int, invisible_ms: int
    ) -> list[PopMessage]:
        body: dict[str, Any] = {
            "max_messages": max_messages,
            "invisible_ms": invisible_ms,
            "wait_ms": wait_ms,
        }
        if self.tags is not None:
            body["tags"] = self.tags
        path = f"/groups/{segment(self.group)}/topics/{segment(self.topic)}/messages:receive"
        try:
            answer = self._transport.call(url, "POST", path, json=body, broker=name, wait_ms=wait_ms)
        except NotFound:  # this broker does not host the topic
            return []
        except (BrokerUnreachable, BrokerError) as exc:
            if not exc.retriable:
                raise
            self._directory.suspect(name)
            self._directory.invalidate()
            return []
        return [PopMessage.from_json(m) for m in answer["messages"]]

    def receive(
        self, max_messages: int = 32, wait_ms: int = 0, invisible_ms: int | None = None
    ) -> list[PopMessage]:
        """Up to ``max_messages`` (1..32) messages, each invisible to the group's other
        consumers for ``invisible_ms`` (default: the consumer's); waits up to ``wait_ms`` when
        no broker has one. A broker that is down is skipped (its messages wait for it)."""
        invisible = self.invisible_ms if invisible_ms is None else invisible_ms
        deadline = self._clock() + wait_ms / 1000
        while True:
            got: list[PopMessage] = []
            brokers = self._brokers()
            for name, url in brokers:
                got += self._receive_at(name, url, max_messages - len(got), 0, invisible)
                if len(got) >= max_messages:
                    return got
            left_ms = int((deadline - self._clock()) * 1000)
            if got or left_ms <= 0:
                return got
            name, url = brokers[0]
            got = self._receive_at(name, url, max_messages, min(left_ms, LONG_POLL_SLICE_MS), invisible)
            if got:
                return got

    # -- ack / change ---------------------------------------------------------------------------

    def _url_of(self, broker: str | None) -> str:
        if broker is None or broker == LOCAL_BROKER:
            return self._directory.any_url()
        return self._directory.address(broker)

    def _call(self, broker: str | None, path: str, body: dict[str, Any]) -> Any:
        """POST at the handle's broker (any broker when it is down: they forward), retried while
        the refusal is retriable (a failover in progress) until the retry policy's deadline."""
        give_up = self._clock() + self._retry.deadline_ms / 1000
        delay = self._retry.backoff_ms / 1000
        while True:
            try:
                return self._transport.call(self._url_of(broker), "POST", path, json=body, broker=broker)
            except ClientError as exc:
                if not exc.retriable or self._clock() >= give_up:
                    raise
                self._directory.invalidate()
                self._sleep(delay)
                delay = min(delay * 2, self._retry.max_backoff_ms / 1000)

    def ack(self, messages: Handles) -> list[AckOutcome]:
        """Ack messages (or their handles), one outcome per item, in order; each broker's
        handles in one request. ``broker_unavailable`` outcomes may be retried."""
        texts = [m.receipt_handle if isinstance(m, PopMessage) else m for m in messages]
        by_broker: dict[str | None, list[int]] = {}
        for i, text in enumerate(texts):
            by_broker.setdefault(handle_broker(text), []).append(i)
        outcomes: list[AckOutcome | None] = [None] * len(texts)
        path = f"/groups/{segment(self.group)}/messages:ack"
        for broker, indexes in by_broker.items():
            answer = self._call(broker, path, {"receipt_handles": [texts[i] for i in indexes]})
            for i, result in zip(indexes, answer["results"], strict=True):
                outcomes[i] = AckOutcome(
                    texts[i], bool(result["ok"]), result.get("error"), result.get("message")
                )
        return [o for o in outcomes if o is not None]

    def change_invisible(self, message: PopMessage | str, invisible_ms: int) -> str:
        """Make the message invisible for ``invisible_ms`` from now; returns the new handle (the
        old one stops working). :class:`RequestRefused` with code ``receipt_handle_expired``
        when it was redelivered or acked since."""
        text = message.receipt_handle if isinstance(message, PopMessage) else message
        path = f"/groups/{segment(self.group)}/messages:changeInvisible"
        answer = self._call(handle_broker(text), path, {"receipt_handle": text, "invisible_ms": invisible_ms})
        return str(answer["receipt_handle"])
