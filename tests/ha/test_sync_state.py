"""The in-sync set and the confirm offset as a pure state machine (time passed in, no sockets):
RocketMQ's shrink / expand / caught-up rules, approval by the authority, and a confirm offset that
never moves back and never passes a member that has not acknowledged."""

from __future__ import annotations

import pytest

from store.ha import InMemorySyncStateAuthority, SyncState
from store.ha.sync_state import InSyncTracker

MASTER, S2, S3 = 1, 2, 3


def tracker(members: set[int], max_not_catchup_ms: int = 15_000) -> InSyncTracker:
    return InSyncTracker(MASTER, SyncState(frozenset(members), 5, 7), max_not_catchup_ms)


def test_the_set_must_hold_the_master() -> None:
    with pytest.raises(ValueError, match="must contain the master"):
        InSyncTracker(MASTER, SyncState(frozenset({S2}), 1, 0), 1000)


def test_master_alone_confirms_its_max_offset() -> None:
    t = tracker({MASTER})
    assert t.confirm_offset(master_max=500, current=100) == 500
    assert t.confirm_offset(master_max=50, current=100) == 100  # never back


def test_confirm_is_the_smallest_ack_and_waits_for_silent_members() -> None:
    t = tracker({MASTER, S2, S3})
    t.connected(S2, async_learner=False)
    assert t.confirm_offset(1000, 0) == 0  # S3 not connected: frozen (#6662)
    t.connected(S3, async_learner=False)
    assert t.confirm_offset(1000, 0) == 0  # nobody acked yet
    t.acked(S2, 800, master_max=1000, now_ms=10)
    t.acked(S3, 600, master_max=1000, now_ms=10)
    assert t.confirm_offset(1000, 0) == 600
    t.disconnected(S3)
    assert t.confirm_offset(1000, 600) == 600


def test_expand_needs_an_ack_at_confirm_within_the_current_epoch() -> None:
    t = tracker({MASTER})
    t.connected(S2, async_learner=False)
    t.connected(S3, async_learner=True)
    t.transferred(S2, master_max=900, now_ms=0)
    t.acked(S2, 850, master_max=900, now_ms=1)
    t.acked(S3, 900, master_max=900, now_ms=1)
    # S2 is behind, S3 a learner
    assert t.desired(now_ms=2, confirm_offset=900, epoch_start_offset=0) == {MASTER}
    t.acked(S2, 900, master_max=900, now_ms=3)
    assert t.desired(now_ms=3, confirm_offset=900, epoch_start_offset=0) == {MASTER, S2}
    assert t.desired(now_ms=3, confirm_offset=900, epoch_start_offset=950) == {MASTER}  # before the epoch


def test_shrink_after_not_catching_up_or_on_disconnect() -> None:
    t = tracker({MASTER, S2, S3}, max_not_catchup_ms=1000)
    t.connected(S2, False)
    t.connected(S3, False)
    t.acked(S2, 100, master_max=100, now_ms=0)
    t.acked(S3, 100, master_max=100, now_ms=0)
    assert t.desired(now_ms=900, confirm_offset=100, epoch_start_offset=0) == {MASTER, S2, S3}
    t.transferred(S3, master_max=300, now_ms=500)
    t.acked(S2, 300, master_max=300, now_ms=600)  # S2 keeps up, S3 stalls
    assert t.desired(now_ms=1200, confirm_offset=100, epoch_start_offset=0) == {MASTER, S2}
    t.disconnected(S2)
    assert t.desired(now_ms=1200, confirm_offset=100, epoch_start_offset=0) == {MASTER}


def test_caught_up_at_the_last_transfer_counts_from_that_transfer() -> None:
    t = tracker({MASTER, S2}, max_not_catchup_ms=1000)
    t.connected(S2, False)
    t.transferred(S2, master_max=500, now_ms=100)
    t.acked(S2, 500, master_max=700, now_ms=400)  # got all it was sent; the master moved on since
    assert t.slaves[S2].caught_up_ms == 100
    assert t.desired(now_ms=1050, confirm_offset=500, epoch_start_offset=0) == {MASTER, S2}
    assert t.desired(now_ms=1150, confirm_offset=500, epoch_start_offset=0) == {MASTER}


def test_pending_change_confirms_over_both_sets() -> None:
    t = tracker({MASTER, S2})
    t.connected(S2, False)
    t.connected(S3, False)
    t.acked(S2, 400, master_max=1000, now_ms=0)
    t.acked(S3, 700, master_max=1000, now_ms=0)
    t.pending = frozenset({MASTER, S3})  # S2 out, S3 in: not approved yet
    assert t.confirm_members() == {MASTER, S2, S3}
    assert t.confirm_offset(1000, 0) == 400
    state = t.approve(frozenset({MASTER, S3}))
    assert state == SyncState(frozenset({MASTER, S3}), 5, 8)
    assert t.confirm_offset(1000, 400) == 700


def test_in_memory_authority_checks_both_epochs() -> None:
    authority = InMemorySyncStateAuthority(SyncState(frozenset({MASTER}), 5, 7))
    assert not authority.propose(frozenset({MASTER, S2}), 4, 7)  # a deposed master
    assert not authority.propose(frozenset({MASTER, S2}), 5, 6)  # an outdated set
    assert authority.propose(frozenset({MASTER, S2}), 5, 7)
    assert authority.state == SyncState(frozenset({MASTER, S2}), 5, 8)
    assert not authority.propose(frozenset({MASTER}), 5, 7)
    assert (authority.proposals, authority.refusals) == (4, 3)
