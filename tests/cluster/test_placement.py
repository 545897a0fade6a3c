"""Queue placement: round robin, growth never moves a queue, pinned brokers checked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster import InvalidPlacement, NoLiveBroker, grow_placement
from cluster.placement import check_pinned


def test_new_topic_is_round_robin_by_name() -> None:
    assert grow_placement((), 4, ["b3", "b1", "b2"]) == ("b1", "b2", "b3", "b1")


def test_growth_keeps_existing_queues_and_fills_a_newcomer_first() -> None:
    current = ("b1", "b2", "b1", "b2")
    assert grow_placement(current, 7, ["b1", "b2", "b3"]) == (*current, "b3", "b3", "b1")


def test_fewer_queues_than_exist_is_no_change() -> None:
    assert grow_placement(("b1", "b2"), 1, ["b3"]) == ("b1", "b2")


def test_refusals() -> None:
    with pytest.raises(NoLiveBroker, match="no live broker"):
        grow_placement((), 2, [])
    with pytest.raises(InvalidPlacement, match="queue count"):
        grow_placement((), 0, ["b1"])
    with pytest.raises(InvalidPlacement, match="queue count"):
        grow_placement((), 100_000, ["b1"])
    with pytest.raises(InvalidPlacement, match="unknown broker"):
        check_pinned(["b9"], ["b1"], ["b1"])
    with pytest.raises(InvalidPlacement, match="not alive"):
        check_pinned(["b1", "b2"], ["b1", "b2"], ["b1"])


@given(
    current=st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=20),
    extra=st.integers(0, 30),
    candidates=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=5),
)
def test_growth_is_a_balanced_extension(current: list[str], extra: int, candidates: list[str]) -> None:
    queues = max(1, len(current) + extra)
    owners = grow_placement(current, queues, candidates)
    assert owners[: len(current)] == tuple(current)  # nothing moves
    assert len(owners) == max(queues, len(current))
    added = owners[len(current) :]
    assert set(added) <= set(candidates)
    load = {name: owners.count(name) for name in set(candidates)}
    if added:  # the new ids leave the candidates within one queue of each other, or only add to the lightest
        before = {name: current.count(name) for name in set(candidates)}
        assert max(load.values()) - min(load.values()) <= max(1, max(before.values()) - min(before.values()))
