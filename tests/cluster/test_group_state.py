"""The replica group's state: golden JSON, and the election and in-sync set rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.group_state import (
    Candidate,
    CorruptGroupState,
    GroupState,
    alter_sync_state_set,
    elect,
    founding_state,
    restart_as_master,
)

STATE = GroupState(master=7, epoch=3, sync_state_set=frozenset({9, 7}), set_epoch=5)


def test_golden_json() -> None:
    assert STATE.to_json() == b'{"master":7,"epoch":3,"sync_state_set":[7,9],"set_epoch":5}'
    assert GroupState.from_json(STATE.to_json(), 4) == GroupState(7, 3, frozenset({7, 9}), 5, 4)
    assert GroupState.from_json(b'{"master":null,"epoch":4,"sync_state_set":[],"set_epoch":6}').master is None
    with pytest.raises(CorruptGroupState):
        GroupState.from_json(b'{"master":"x"}')


def test_founding_and_restart() -> None:
    assert founding_state(3) == GroupState(3, 1, frozenset({3}), 1)
    assert restart_as_master(STATE, 7) == GroupState(7, 4, frozenset({7}), 6)


def test_a_live_master_is_kept() -> None:
    live = {7: Candidate(7, 3, 100), 9: Candidate(9, 3, 200)}
    assert elect(STATE, live) is None


def test_the_most_advanced_in_sync_member_wins() -> None:
    live = {9: Candidate(9, 3, 100), 11: Candidate(11, 4, 900), 12: Candidate(12, 3, 150)}
    state = GroupState(master=7, epoch=3, sync_state_set=frozenset({7, 9, 12}), set_epoch=5)
    assert elect(state, live) == GroupState(master=12, epoch=4, sync_state_set=frozenset({12}), set_epoch=6)


def test_no_in_sync_member_no_master_unless_unclean() -> None:
    live = {11: Candidate(11, 2, 50)}
    assert elect(STATE, live) is None
    assert elect(STATE, live, unclean=True) == GroupState(11, 4, frozenset({11}), 6)
    assert elect(STATE, {}, unclean=True) is None


def test_sync_state_set_changes_are_fenced_by_both_epochs() -> None:
    assert alter_sync_state_set(STATE, 7, frozenset({7}), 3, 5) == GroupState(7, 3, frozenset({7}), 6)
    assert alter_sync_state_set(STATE, 9, frozenset({7, 9}), 3, 5) is None  # not the master
    assert alter_sync_state_set(STATE, 7, frozenset({7, 9}), 2, 5) is None  # an older epoch
    assert alter_sync_state_set(STATE, 7, frozenset({7, 9}), 3, 4) is None  # a stale set version
    assert alter_sync_state_set(STATE, 7, frozenset({9}), 3, 5) is None  # never drops the master


@given(
    members=st.dictionaries(
        st.integers(1, 9), st.tuples(st.integers(0, 5), st.integers(0, 1000)), max_size=5
    ),
    in_sync=st.frozensets(st.integers(1, 9), min_size=1, max_size=5),
    master=st.one_of(st.none(), st.integers(1, 9)),
)
def test_an_election_only_ever_picks_a_live_in_sync_member(
    members: dict[int, tuple[int, int]], in_sync: frozenset[int], master: int | None
) -> None:
    state = GroupState(master, 4, in_sync, 8)
    live = {m: Candidate(m, epoch, offset) for m, (epoch, offset) in members.items()}
    after = elect(state, live)
    if master in live:
        assert after is None
    elif after is not None:
        assert after.master in live and after.master in in_sync
        assert after.epoch == 5 and after.set_epoch == 9 and after.sync_state_set == {after.master}
    else:
        assert not (set(live) & in_sync)
