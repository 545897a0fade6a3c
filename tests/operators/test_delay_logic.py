"""The delay resolver's pure decisions: action times, the burst cap, re-arming, rolls."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.operators.delay import KIND_LEVEL, KIND_TIMER, action_time, fire, next_timer

DAY = 86_400_000


def test_action_time_is_the_due_time_within_the_roll_window() -> None:
    assert action_time(5_000, KIND_LEVEL, 1_000, DAY) == 5_000
    assert action_time(5_000, KIND_TIMER, 1_000, DAY) == 5_000
    # A timer message due past the window is acted on (rolled) when the window has passed.
    assert action_time(10 * DAY, KIND_TIMER, 1_000, DAY) == 1_000 + DAY
    # Levels never exceed 2 h: they are never rolled whatever the window.
    assert action_time(10 * DAY, KIND_LEVEL, 1_000, DAY) == 10 * DAY


def test_fire_emits_due_pointers_in_due_then_offset_order_and_keeps_the_rest() -> None:
    pending = [
        (30, 900, 900, KIND_LEVEL, 0, 0, 0),
        (10, 1000, 1000, KIND_LEVEL, 0, 0, 0),
        (20, 900, 900, KIND_LEVEL, 0, 0, 0),
        (40, 1500, 1500, KIND_LEVEL, 0, 0, 0),
    ]
    emit, keep = fire(pending, now_ms=1000, burst_cap=10)
    assert [p[0] for p in emit] == [20, 30, 10]
    assert [p[0] for p in keep] == [40]
    assert next_timer(keep, 1000) == 1500
    assert next_timer([], 1000) is None


def test_burst_cap_spreads_catch_up_over_batches_without_loss_or_duplicates() -> None:
    pending = [(i, 100 + i % 7, 100 + i % 7, KIND_LEVEL, 0, 0, 0) for i in range(25)]
    emitted: list[int] = []
    now = 10_000
    rounds = 0
    while pending:
        emit, pending = fire(pending, now, burst_cap=10)
        assert len(emit) <= 10
        emitted += [p[0] for p in emit]
        when = next_timer(pending, now)
        assert when is None or when == now + 1  # re-armed at once for the rest
        now += 1
        rounds += 1
    assert sorted(emitted) == list(range(25)) and rounds == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000), st.integers(0, 1)), max_size=60),
    st.integers(0, 6000),
    st.integers(1, 20),
)
def test_fire_never_emits_early_and_partitions_the_input(
    raw: list[tuple[int, int, int]], now: int, cap: int
) -> None:
    pending = [(off, due, action_time(due, kind, 0, 3000), kind, 0, 0, 0) for off, due, kind in raw]
    emit, keep = fire(pending, now, cap)
    assert sorted(emit + keep) == sorted(pending)
    assert all(p[2] <= now for p in emit) and len(emit) <= cap
    when = next_timer(keep, now)
    assert when is None or when > now
