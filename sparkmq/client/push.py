"""A push-style worker over a :class:`SimpleConsumer`: run a handler per message, ack on success.

    def handle(message: PopMessage) -> None:
        charge(message.body)              # raise to have the message delivered again

    worker = PushWorker(client.simple_consumer("orders", "billing"), handle)
    worker.run(stop=stop_event)           # until stop is set

While the handler runs, a keeper thread extends the message's invisible time (each time a
third of it is left), so a slow handler does not see its message handed to another consumer.
A handler that raises leaves the message unacked: it comes back after ``retry_delay_ms``
(default: its invisible time), with ``delivery_attempt`` + 1, until the group's maximum sends it
to the DLQ. A message whose extension was refused (``receipt_handle_expired``: it was
redelivered meanwhile) is still acked with the newest handle it has; that ack then fails and is
reported, which is POP's at-least-once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmq.client.errors import ClientError
from sparkmq.client.simple_consumer import PopMessage, SimpleConsumer

log = logging.getLogger("sparkmq.client.push")

Handler = Callable[[PopMessage], None]


@dataclass
class PushStats:
    """What a worker did (counters since it started)."""

    handled: int = 0
    acked: int = 0
    failed: int = 0
    extended: int = 0
    ack_refused: int = 0
    errors: list[str] = field(default_factory=list)


class _Keeper:
    """Extends the handle of the message being handled until :meth:`done`."""

    def __init__(self, consumer: SimpleConsumer, message: PopMessage, invisible_ms: int) -> None:
        self.handle = message.receipt_handle
        self.extended = 0
        self._consumer = consumer
        self._invisible_ms = invisible_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkmq-pop-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period_s = self._invisible_ms * 2 / 3 / 1000
        while not self._stop.wait(period_s):
            try:
                self.handle = self._consumer.change_invisible(self.handle, self._invisible_ms)
                self.extended += 1
            except ClientError as exc:
                log.warning("could not extend the invisible time of a message: %s", exc)
                return

    def done(self) -> str:
        """Stop extending; the newest handle."""
        self._stop.set()
        self._thread.join()
        return self.handle


class PushWorker:
    """Receives from ``consumer`` and runs ``handler`` on each message, one at a time."""

    def __init__(
        self,
        consumer: SimpleConsumer,
        handler: Handler,
        *,
        batch: int = 16,
        wait_ms: int = 2_000,
        retry_delay_ms: int | None = None,
    ) -> None:
        self.consumer = consumer
        self.handler = handler
        self.batch = batch
        self.wait_ms = wait_ms
        self.retry_delay_ms = retry_delay_ms
        self.stats = PushStats()

    def run_once(self) -> int:
        """One receive and its messages handled; how many messages came."""
        messages = self.consumer.receive(max_messages=self.batch, wait_ms=self.wait_ms)
        for message in messages:
            self._handle(message)
        return len(messages)

    def run(self, stop: threading.Event, max_messages: int | None = None) -> PushStats:
        """Until ``stop`` is set (or ``max_messages`` were handled)."""
        while not stop.is_set() and (max_messages is None or self.stats.handled < max_messages):
            self.run_once()
        return self.stats

    def _handle(self, message: PopMessage) -> None:
        keeper = _Keeper(self.consumer, message, self.consumer.invisible_ms)
        started = time.monotonic()
        try:
            self.handler(message)
        except Exception as exc:  # the handler's failure: the message comes back
            handle = keeper.done()
            self.stats.failed += 1
            self.stats.errors.append(f"{message.msg_id}: {type(exc).__name__}: {exc}")
            log.info("handler failed on %s (attempt %d): %s", message.msg_id, message.delivery_attempt, exc)
            if self.retry_delay_ms is not None:
                self._retry_sooner(handle)
            return
        finally:
            self.stats.handled += 1
        handle = keeper.done()
        self.stats.extended += keeper.extended
        outcome = self.consumer.ack([handle])[0]
        if outcome.ok:
            self.stats.acked += 1
        else:
            self.stats.ack_refused += 1
            log.warning(
                "ack of %s refused after %.1f s: %s",
                message.msg_id,
                time.monotonic() - started,
                outcome.error,
            )

    def _retry_sooner(self, handle: str) -> None:
        assert self.retry_delay_ms is not None
        try:
            self.consumer.change_invisible(handle, self.retry_delay_ms)
        except ClientError as exc:
            log.info("could not shorten the invisible time of a failed message: %s", exc)
