"""Which queue a message goes to: an explicit queue, its sharding key's hash, or round robin.

The sharding rule is RocketMQ's ``SelectMessageQueueByHash``: ``abs(key.hashCode()) % queues``
with Java's ``String.hashCode``, so one key always lands on one queue and keeps its order, and
a RocketMQ producer given the same key picks the same queue. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from store.format.java_hash import java_string_hash, java_string_hashes


def sharding_queue(key: str, queue_count: int) -> int:
    """The queue of ``key`` among ``queue_count`` queues."""
    return abs(java_string_hash(key)) % queue_count


def sharding_queues(keys: Sequence[str], queue_count: int) -> npt.NDArray[np.int32]:
    """:func:`sharding_queue` for many keys at once."""
    hashes = java_string_hashes(keys).astype(np.int64)
    return (np.abs(hashes) % queue_count).astype(np.int32)
