"""Waiting on a condition with a deadline: tests never sleep and hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], timeout_s: float = 15.0, what: str = "condition", poll_s: float = 0.05
) -> T:
    """Poll ``condition`` until it returns something truthy and return that; raise
    ``AssertionError`` naming ``what`` (and the last value seen) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {value!r}")
        time.sleep(poll_s)
