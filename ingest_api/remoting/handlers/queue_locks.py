"""The queue-lock table of orderly consumption (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), pure.

A queue of a group is held by one client id; a lock not renewed within ``expiry_ms``
(RocketMQ's ``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s) is free again. Orderly
consumers renew every 20 s and before consuming, so a crashed client's queues are taken over
after the expiry. Time is passed in; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from ingest_api.remoting.bodies import MessageQueueRef

#: RocketMQ's ``REBALANCE_LOCK_MAX_LIVE_TIME`` default.
DEFAULT_LOCK_EXPIRY_MS = 60_000


class QueueLocks:
    """(group, queue) -> (holder client id, last renewal ms); not thread-safe (the loop owns it)."""

    def __init__(self, expiry_ms: int = DEFAULT_LOCK_EXPIRY_MS) -> None:
        self.expiry_ms = expiry_ms
        self._held: dict[tuple[str, MessageQueueRef], tuple[str, int]] = {}

    def holder(self, group: str, mq: MessageQueueRef, now_ms: int) -> str | None:
        entry = self._held.get((group, mq))
        if entry is None or now_ms - entry[1] > self.expiry_ms:
            return None
        return entry[0]

    def lock(
        self, group: str, client_id: str, mqs: Iterable[MessageQueueRef], now_ms: int
    ) -> list[MessageQueueRef]:
        """Take or renew each free, expired or own queue; returns those the client now holds."""
        granted = []
        for mq in mqs:
            if self.holder(group, mq, now_ms) in (None, client_id):
                self._held[(group, mq)] = (client_id, now_ms)
                granted.append(mq)
        return granted

    def unlock(self, group: str, client_id: str, mqs: Iterable[MessageQueueRef]) -> None:
        """Release the queues ``client_id`` holds among ``mqs`` (others' locks stay)."""
        for mq in mqs:
            entry = self._held.get((group, mq))
            if entry is not None and entry[0] == client_id:
                del self._held[(group, mq)]
