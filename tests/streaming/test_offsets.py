"""Offset JSON order, fair-share rate limiting and partition grouping (pure)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.offsets import (
    QueueRange,
    fair_share_end,
    group_ranges,
    normalize,
    queue_key,
    ranges_between,
    split_key,
)


def test_keys_are_strings_in_topic_then_numeric_queue_order() -> None:
    offsets = normalize({"b/0": 1, "a/10": 2, "a/2": 3, "a/0": 4})
    assert list(offsets) == ["a/0", "a/2", "a/10", "b/0"]
    # Spark compares offsets as JSON text: the same positions must serialise identically.
    shuffled = normalize(dict(reversed(list(offsets.items()))))
    assert json.dumps(shuffled) == json.dumps(offsets)
    assert split_key(queue_key("%RETRY%g", 7)) == ("%RETRY%g", 7)
    with pytest.raises(ValueError, match="malformed"):
        split_key("nokey")


def test_no_limit_reads_everything() -> None:
    start = {"t/0": 0, "t/1": 5}
    assert fair_share_end(start, {"t/0": 10, "t/1": 5}, None) == {"t/0": 10, "t/1": 5}
    assert fair_share_end(start, {"t/0": 10, "t/1": 5}, 1000) == {"t/0": 10, "t/1": 5}


def test_limit_is_split_in_proportion_and_exact() -> None:
    start = {"t/0": 0, "t/1": 0, "t/2": 0}
    end = fair_share_end(start, {"t/0": 60, "t/1": 30, "t/2": 10}, 10)
    assert end == {"t/0": 6, "t/1": 3, "t/2": 1}
    end = fair_share_end(start, {"t/0": 100, "t/1": 100, "t/2": 100}, 10)
    assert sum(end.values()) == 10
    assert sorted(end.values()) == [3, 3, 4]


def test_small_queues_are_not_starved() -> None:
    start = {"t/0": 0, "t/1": 0}
    target = {"t/0": 1000, "t/1": 2}
    seen_small = 0
    position = dict(start)
    for _ in range(5):
        position = fair_share_end(position, target, 10)
        seen_small = position["t/1"]
    assert seen_small == 2


def test_repeated_planning_drains_exactly_with_limit() -> None:
    target = {"a/0": 7, "a/1": 5, "b/0": 0}
    position = {"a/0": 0, "a/1": 0, "b/0": 0}
    sizes = []
    while position != target:
        end = fair_share_end(position, target, 4)
        sizes.append(sum(end.values()) - sum(position.values()))
        position = end
    assert sizes == [4, 4, 4]


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 200)), min_size=1, max_size=12),
    st.integers(1, 500),
)
def test_fair_share_properties(queues: list[tuple[int, int]], limit: int) -> None:
    start = {queue_key("t", i): s for i, (s, _) in enumerate(queues)}
    target = {queue_key("t", i): s + n for i, (s, n) in enumerate(queues)}
    end = fair_share_end(start, target, limit)
    backlog = sum(n for _, n in queues)
    assert sum(end[k] - start[k] for k in start) == min(limit, backlog)
    assert all(start[k] <= end[k] <= target[k] for k in start)
    assert list(end) == list(normalize(end))


def test_ranges_between_skips_empty_and_unknown() -> None:
    ranges = ranges_between({"t/0": 3, "t/1": 4}, {"t/1": 4, "t/0": 9, "t/2": 5})
    assert ranges == [QueueRange("t", 0, 3, 9)]


def test_group_ranges_balances_and_splits() -> None:
    ranges = [QueueRange("t", q, 0, n) for q, n in enumerate([10, 1, 1, 0, 8])]
    groups = group_ranges(ranges, 2)
    assert len(groups) == 2
    assert [sum(r.size for r in g) for g in groups] == [10, 10]
    assert groups[0] == (QueueRange("t", 0, 0, 10),)
    assert groups[1] == (QueueRange("t", 1, 0, 1), QueueRange("t", 2, 0, 1), QueueRange("t", 4, 0, 8))
    # One big queue is cut into consecutive pieces.
    assert group_ranges([QueueRange("t", 0, 5, 12)], 3) == [
        (QueueRange("t", 0, 5, 8),),
        (QueueRange("t", 0, 8, 11),),
        (QueueRange("t", 0, 11, 12),),
    ]
    assert group_ranges([], 4) == []
    assert group_ranges([QueueRange("t", 0, 0, 2)], 8) == [
        (QueueRange("t", 0, 0, 1),),
        (QueueRange("t", 0, 1, 2),),
    ]


@given(st.lists(st.integers(0, 300), min_size=0, max_size=20), st.integers(1, 16))
def test_group_ranges_cover_every_offset_once(sizes: list[int], n: int) -> None:
    ranges = [QueueRange("t", q, 100, 100 + s) for q, s in enumerate(sizes)]
    groups = group_ranges(ranges, n)
    assert len(groups) <= n
    covered = sorted((r.queue_id, o) for g in groups for r in g for o in range(r.start, r.end))
    assert covered == sorted((q, o) for q, s in enumerate(sizes) for o in range(100, 100 + s))
