"""Timer messages at admission (RocketMQ 5 ``HookUtils.checkIfTimerMessage`` /
``transformTimerMessage``): when a message asks to be delivered, and where it waits.

A producer asks with one of three properties, read in this order of precedence:

1. ``TIMER_DELAY_SEC``: deliver at ``now + sec * 1000``;
2. ``TIMER_DELAY_MS``: deliver at ``now + ms``;
3. ``TIMER_DELIVER_MS``: deliver at that epoch millisecond.

A value that is not a (Java ``Long.parseLong``) integer is refused (``WHEEL_TIMER_MSG_ILLEGAL``).
A time not after ``now`` is stored as a normal message; a time further out than the maximum
delay is refused. Otherwise the message is parked in ``rmq_sys_wheel_timer`` queue 0 with
``TIMER_OUT_MS`` = the time rounded *down* to the precision (an exact multiple goes one step
lower), which the delay resolver delivers at ``TIMER_OUT_MS + precision``: the requested time
rounded up to the next precision boundary, never early.

A delay level wins over timer properties, which are then dropped (RocketMQ clears them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from store.errors import InvalidArgument
from store.format.vocabulary import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    TIMER_REQUEST_PROPERTIES,
)

#: RocketMQ's ``timerMaxDelaySec`` (3 days) and ``timerPrecisionMs``.
DEFAULT_TIMER_MAX_DELAY_MS = 3 * 86_400_000
DEFAULT_TIMER_PRECISION_MS = 1000
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_LONG_MAX = 2**63 - 1


class TimerIllegal(InvalidArgument):
    """A timer request RocketMQ answers with ``WHEEL_TIMER_MSG_ILLEGAL``; ``property`` names it."""

    def __init__(self, message: str, property_name: str) -> None:
        super().__init__(message)
        self.property = property_name


@dataclass(frozen=True, slots=True)
class TimerRules:
    max_delay_ms: int = DEFAULT_TIMER_MAX_DELAY_MS
    precision_ms: int = DEFAULT_TIMER_PRECISION_MS


DEFAULT_TIMER_RULES = TimerRules()


def is_timer_request(properties: Mapping[str, str]) -> bool:
    """Whether ``properties`` ask for a timer (and the message was not transformed already)."""
    if PROPERTY_TIMER_OUT_MS in properties:
        return False
    return any(name in properties for name in TIMER_REQUEST_PROPERTIES)


def requested_deliver_ms(properties: Mapping[str, str], now_ms: int) -> tuple[int, str]:
    """``(deliver epoch ms, the property that set it)`` by RocketMQ's precedence."""
    for name in TIMER_REQUEST_PROPERTIES:
        raw = properties.get(name)
        if raw is None:
            continue
        if not _JAVA_LONG.fullmatch(raw) or abs(int(raw)) > _LONG_MAX:
            raise TimerIllegal(f"timer message illegal: {name}={raw!r} is not an integer", name)
        value = int(raw)
        if name == PROPERTY_TIMER_DELAY_SEC:
            return now_ms + value * 1000, name
        if name == PROPERTY_TIMER_DELAY_MS:
            return now_ms + value, name
        return value, name
    raise TimerIllegal("timer message illegal: no timer property", PROPERTY_TIMER_DELIVER_MS)


def timer_out_ms(deliver_ms: int, precision_ms: int) -> int:
    """RocketMQ's slot of ``deliver_ms``: rounded down, an exact multiple one precision lower."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def admit_timer(properties: Mapping[str, str], now_ms: int, rules: TimerRules) -> int | None:
    """``TIMER_OUT_MS`` for a timer request due in the future, or ``None`` when it is due already
    (stored as a normal message). Raises :class:`TimerIllegal` for what RocketMQ refuses."""
    deliver_ms, name = requested_deliver_ms(properties, now_ms)
    if deliver_ms <= now_ms:
        if PROPERTY_TIMER_DEL_UNIQKEY in properties:
            raise TimerIllegal("timer message illegal: a recall marker must be due in the future", name)
        return None
    if deliver_ms - now_ms > rules.max_delay_ms:
        raise TimerIllegal(
            "timer message illegal, the delay time should not be bigger than the max delay "
            f"{rules.max_delay_ms}ms (asked {deliver_ms - now_ms}ms through {name})",
            name,
        )
    return timer_out_ms(deliver_ms, rules.precision_ms)


def without_timer_requests(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` minus the timer requests (a delay level wins over them)."""
    return {k: v for k, v in properties.items() if k not in TIMER_REQUEST_PROPERTIES}
