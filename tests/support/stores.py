"""Store configurations and a settable clock for tests.

The defaults preallocate a 1 GiB CommitLog file per store and the machine's disk is shared, so
tests use small layouts: :func:`tiny_config` makes files roll, age out and recover within a
few hundred messages (store tests); :func:`light_config` is for tests that write more (doors,
Spark). A store records its layout, so every later open adopts it.
"""

from __future__ import annotations

from pathlib import Path

from store import StoreConfig


class ManualClock:
    """A settable millisecond clock (time is injected, never slept on)."""

    def __init__(self, start_ms: int = 1_763_700_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def tiny_config(store_dir: Path, **changes: object) -> StoreConfig:
    """64 KiB CommitLog files, 64-unit ConsumeQueue files, a 97-slot index, no background threads."""
    base = StoreConfig(
        store_dir=store_dir,
        commitlog_file_size_bytes=64 * 1024,
        consume_queue_units_per_file=64,
        index_hash_slots=97,
        index_max_entries=400,
        default_queues_per_topic=4,
        background_services=False,
    )
    return base.with_changes(**changes) if changes else base.validate()


def light_config(store_dir: Path, **changes: object) -> StoreConfig:
    """64 MiB CommitLog files and a 10k-slot index: light on disk, room for real traffic."""
    base = StoreConfig(
        store_dir=store_dir,
        commitlog_file_size_bytes=64 << 20,
        consume_queue_units_per_file=10_000,
        index_hash_slots=10_000,
        index_max_entries=40_000,
        default_queues_per_topic=4,
    )
    return base.with_changes(**changes) if changes else base.validate()
