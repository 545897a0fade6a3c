"""``minOffsetsPerTrigger`` with ``maxTriggerDelay``: wait for enough data, but not too long.

The rule of Spark's Kafka source (``KafkaMicroBatchStream.delayBatch``), as a small state
machine with an injected clock so that tests drive it without waiting:

* when ``maxTriggerDelay`` has passed since the last batch the gate fired for, fire (even with
  less than the minimum; with nothing at all the planning step simply finds no batch);
* else hold the batch back while fewer than ``minOffsetsPerTrigger`` offsets are waiting;
* else fire.

The clock starts at the first planning step, which therefore always fires, as Kafka's does
(its "last trigger" starts at 0): a (re)started query reads what is there at once, then
batches wait for the minimum. PySpark has no composite read limit, so the source applies the
gate itself on top of ``maxOffsetsPerTrigger``; never under ``Trigger.AvailableNow`` or with a
``ReadAllAvailable`` limit (a run that must drain would otherwise hang).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class MinTriggerGate:
    """Holds micro-batches back until ``min_messages`` offsets wait or ``max_delay_s`` passed."""

    def __init__(
        self, min_messages: int, max_delay_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if min_messages < 1 or max_delay_s < 0:
            raise ValueError(
                f"min_messages must be >= 1 and max_delay_s >= 0, got {min_messages}, {max_delay_s}"
            )
        self.min_messages = min_messages
        self.max_delay_s = max_delay_s
        self.clock = clock
        self._last_fired: float | None = None

    def holds_back(self, waiting: int) -> bool:
        """Whether to skip this planning step with ``waiting`` offsets available to read."""
        now = self.clock()
        if self._last_fired is None or now - self._last_fired >= self.max_delay_s:
            self._last_fired = now
            return False
        if waiting < self.min_messages:
            return True
        self._last_fired = now
        return False
