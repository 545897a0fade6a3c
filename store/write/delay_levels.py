"""Delay levels (RocketMQ ``messageDelayLevel``).

Level N (1-based) waits ``levels[N-1]`` milliseconds; a delayed message is parked in
``SCHEDULE_TOPIC_XXXX`` queue ``N-1`` with its deliver timestamp as the ConsumeQueue tagsCode.
Levels above the table clamp to the last level.
"""

from __future__ import annotations

from store.config import DEFAULT_DELAY_LEVELS
from store.errors import InvalidArgument

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(token: str) -> int:
    """``"500ms"``, ``"5s"``, ``"1m"``, ``"2h"``, ``"3d"`` in milliseconds."""
    unit = "ms" if token.endswith("ms") else token[-1:]
    number = token[: -len(unit)]
    if unit not in _UNIT_MS or not number.isdigit():
        raise InvalidArgument(
            f"bad duration {token!r}: expected a whole number and a unit, e.g. 500ms, 5s, 1m, 2h, 3d"
        )
    return int(number) * _UNIT_MS[unit]


def parse_delay_levels(spec: str = DEFAULT_DELAY_LEVELS) -> tuple[int, ...]:
    """Parse ``"1s 5s ... 2h"`` into milliseconds per level (units ms, s, m, h, d)."""
    levels: list[int] = []
    for token in spec.split():
        try:
            levels.append(parse_duration_ms(token))
        except InvalidArgument:
            raise InvalidArgument(
                f"bad delay level {token!r} in {spec!r}: expected e.g. 5s, 1m, 2h"
            ) from None
    if not levels:
        raise InvalidArgument("delay level table is empty")
    return tuple(levels)


def clamp_delay_level(level: int, levels: tuple[int, ...]) -> int:
    """RocketMQ rule: levels above the table become the highest level; <= 0 means no delay."""
    if level <= 0:
        return 0
    return min(level, len(levels))
