"""The wall clock: the one place sparkmq reads the time of day, so tests can inject their own.

Components take a ``clock_ms: Clock`` (epoch milliseconds) and default to :func:`wall_clock_ms`;
the broker hands its store's clock to the doors (``MessageStore.now_ms``), so a test that sets
the store's clock moves every door with it. Durations are measured with ``time.monotonic`` /
``time.perf_counter`` where they are taken, never with this clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Epoch milliseconds, injected.
Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Epoch milliseconds of the system clock."""
    return time.time_ns() // 1_000_000
