"""POP consumption's limits and cadence (one frozen dataclass, validated)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from store import InvalidArgument

#: RocketMQ refuses a pop of more than 32 messages (``PopMessageProcessor``).
MAX_MESSAGES_PER_RECEIVE = 32


@dataclass(frozen=True)
class PopConfig:
    #: Shortest and longest invisible time a receive or a change accepts (RocketMQ's proxy
    #: wants >= 10 s from its clients; short times are allowed here for tests and fast retries).
    min_invisible_ms: int = 1_000
    max_invisible_ms: int = 12 * 3_600_000
    #: Longest long-poll wait of a receive.
    max_wait_ms: int = 30_000
    #: A snapshot is written once this many state records follow the last one: it bounds the
    #: replay on open (and lets the history before it age out with the CommitLog).
    snapshot_every_records: int = 10_000
    #: Longest sleep of the expiry thread between checks (it also wakes at the next expiry).
    expiry_tick_ms: int = 200
    #: Run the expiry thread (tests with a manual clock call ``PopService.run_due`` instead).
    background: bool = True

    def validate(self) -> PopConfig:
        checks = (
            (
                0 < self.min_invisible_ms <= self.max_invisible_ms,
                "need 0 < min_invisible_ms <= max_invisible_ms",
            ),
            (self.max_wait_ms >= 0, "max_wait_ms must be >= 0"),
            (self.snapshot_every_records >= 1, "snapshot_every_records must be >= 1"),
            (self.expiry_tick_ms >= 1, "expiry_tick_ms must be >= 1"),
        )
        for ok, reason in checks:
            if not ok:
                raise InvalidArgument(f"PopConfig: {reason}")
        return self

    def with_changes(self, **changes: object) -> PopConfig:
        return dataclasses.replace(self, **changes).validate()  # type: ignore[arg-type]
