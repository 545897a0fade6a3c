"""The transaction resolver's decisions as pure functions: first check after the immunity (or
the message's own), one check per interval, a discard after the last check or past retention."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streaming.operators.transactions import (
    ACTION_CHECK,
    ACTION_DISCARD,
    STATUS_ENDED,
    STATUS_PREPARED,
    TransactionSettings,
    first_check_ms,
    on_fire,
)

SETTINGS = TransactionSettings(
    immunity_ms=6000, check_interval_ms=30_000, check_max=15, reserved_ms=72 * 3_600_000
)


def prepared(born: int, checks: int = 0) -> tuple[object, ...]:
    return (STATUS_PREPARED, born, "pg", "orders", "UNIQ", 1234, checks, born + 6000)


def test_first_check_waits_for_the_longer_immunity() -> None:
    assert first_check_ms(1000, 6000, None) == 7000
    assert first_check_ms(1000, 6000, 60) == 61_000  # CHECK_IMMUNITY_TIME_IN_SECONDS
    assert first_check_ms(1000, 6000, 2) == 7000


def test_a_silent_producer_gets_exactly_check_max_checks_then_a_discard() -> None:
    state, now, actions = prepared(0), 6000, []
    while True:
        action, new_state, timer = on_fire(state, now, SETTINGS)
        actions.append(action)
        if action == ACTION_DISCARD:
            assert new_state is not None and new_state[0] == STATUS_ENDED and new_state[6] == 15
            break
        assert action == ACTION_CHECK and timer == now + 30_000
        assert new_state is not None and new_state[6] == len(actions)
        state, now = new_state, timer
    assert actions == [ACTION_CHECK] * 15 + [ACTION_DISCARD]
    tombstone = on_fire(new_state, now + SETTINGS.tombstone_ms, SETTINGS)
    assert tombstone == (None, None, None), "an ended transaction's timer only clears its state"


@given(age=st.integers(0, 10**10), checks=st.integers(0, 20))
def test_past_retention_is_discarded_without_a_check(age: int, checks: int) -> None:
    action, _, _ = on_fire(prepared(0, checks), age, SETTINGS)
    expected = ACTION_DISCARD if checks >= 15 or age > SETTINGS.reserved_ms else ACTION_CHECK
    assert action == expected


def test_an_op_read_before_its_half_leaves_a_tombstone_and_the_half_is_never_checked() -> None:
    from streaming.operators.transactions import on_input

    tombstone, timer = on_input(None, has_op=True, first_half=None, now_ms=100, settings=SETTINGS)
    assert tombstone is not None and tombstone[0] == STATUS_ENDED and timer == 100 + SETTINGS.tombstone_ms
    late_half = (50, "pg", "orders", "UNIQ", 7, None)
    assert on_input(tombstone, has_op=False, first_half=late_half, now_ms=200, settings=SETTINGS) == (
        None,
        None,
    )
    assert on_fire(tombstone, timer, SETTINGS) == (None, None, None)  # cleared later, never checked


def test_a_new_half_is_prepared_with_its_first_check_after_the_immunity() -> None:
    from streaming.operators.transactions import on_input

    state, timer = on_input(
        None, has_op=False, first_half=(1000, "pg", "t", "U", 9, 60), now_ms=1500, settings=SETTINGS
    )
    assert state == (STATUS_PREPARED, 1000, "pg", "t", "U", 9, 0, 61_000) and timer == 61_000
    ended, _ = on_input(state, has_op=True, first_half=None, now_ms=2000, settings=SETTINGS)
    assert ended is not None and ended[0] == STATUS_ENDED and ended[1] == 1000 and ended[2] == "pg"
