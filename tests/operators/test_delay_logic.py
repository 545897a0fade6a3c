"""The delay resolver's pure decisions: ranges of level queues, packed timer pointers, action
times, the burst cap, re-arming, rolls; and the processor under PySpark's TwsTester."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.streaming.tws_tester import TwsTester

from streaming.operators.delay import (
    LEGACY_PENDING_SCHEMA,
    ROW_RELOCATION,
    ROW_SUMMARY,
    DelayResolver,
    DelaySettings,
)
from streaming.operators.delay_state import (
    ENTRY_POINTERS,
    ENTRY_RANGE,
    KIND_LEVEL,
    KIND_TIMER,
    Entry,
    Pointers,
    action_times,
    entries_of,
    fire,
    next_timer,
    pack_pointers,
    summarize,
    unpack_pointers,
)

DAY = 86_400_000


def arrays(*values: list[int]) -> list[np.ndarray]:
    return [np.asarray(v, dtype=np.int64) for v in values]


def test_action_time_is_the_due_time_within_the_roll_window() -> None:
    due, kinds = arrays([5_000, 5_000, 10 * DAY, 10 * DAY], [KIND_LEVEL, KIND_TIMER, KIND_TIMER, KIND_LEVEL])
    # A timer message due past the window is acted on (rolled) when the window has passed;
    # levels never exceed 2 h: they are never rolled whatever the window.
    assert action_times(due, kinds, 1_000, DAY).tolist() == [5_000, 5_000, 1_000 + DAY, 10 * DAY]


def test_level_messages_become_one_range_per_run_of_queue_offsets() -> None:
    kinds = [KIND_LEVEL] * 6
    due = [900, 950, 1000, 920, 990, 930]
    queues = [0, 0, 0, 2, 2, 0]
    offsets = [10, 11, 12, 4, 5, 14]  # queue 0: 10-12 then 14 (13 is in another bucket)
    entries = entries_of(*arrays(kinds, due, [0] * 6, [0] * 6, queues, offsets), now_ms=0, roll_window_ms=DAY)
    assert entries == [
        Entry(ENTRY_RANGE, 1000, 0, 10, 3),
        Entry(ENTRY_RANGE, 930, 0, 14, 1),
        Entry(ENTRY_RANGE, 990, 2, 4, 2),
    ]


def test_timer_pointers_are_packed_per_action_time_in_due_then_offset_order() -> None:
    entries = entries_of(
        *arrays(
            [KIND_TIMER] * 4,
            [900, 800, 10 * DAY, 800],
            [30, 20, 40, 10],
            [1, 2, 3, 4],
            [-1] * 4,
            [7, 5, 8, 6],
        ),
        now_ms=0,
        roll_window_ms=DAY,
    )
    assert [(e.kind, e.action_ms, e.messages, e.first_offset) for e in entries] == [
        (ENTRY_POINTERS, 900, 3, 5),
        (ENTRY_POINTERS, DAY, 1, 8),
    ]
    first = unpack_pointers(entries[0].pointers or b"", 3)
    assert first.commitlog_offsets.tolist() == [10, 20, 30]
    assert first.due_ms.tolist() == [800, 800, 900] and first.enqueue_ms.tolist() == [4, 2, 1]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2**40), st.integers(-(2**40), 2**40), st.integers(0, 2**40)), max_size=50
    )
)
def test_packed_pointers_round_trip(rows: list[tuple[int, int, int]]) -> None:
    pointers = Pointers(*arrays(*(list(c) for c in zip(*rows, strict=True)))) if rows else Pointers.empty()
    back = unpack_pointers(pack_pointers(pointers), len(rows))
    assert [c.tolist() for c in back.columns()] == [c.tolist() for c in pointers.columns()]


def test_fire_emits_due_entries_in_action_order_and_keeps_the_rest() -> None:
    timers = Pointers(*arrays([5, 6], [0, 0], [900, 1000]))
    entries = [
        Entry(ENTRY_RANGE, 1000, 3, 100, 4),
        Entry(ENTRY_POINTERS, 950, -1, 0, 2, pack_pointers(timers)),
        Entry(ENTRY_RANGE, 1500, 3, 104, 2),
    ]
    fired = fire(entries, now_ms=1000, burst_cap=10)
    assert fired.ranges == [(3, 100, 4, 1000)]
    assert fired.pointers.commitlog_offsets.tolist() == [5, 6]
    assert fired.keep == [Entry(ENTRY_RANGE, 1500, 3, 104, 2)]
    assert next_timer(fired.keep, 1000) == 1500 and next_timer([], 1000) is None


def test_burst_cap_splits_ranges_and_pointers_without_loss_or_duplicates() -> None:
    timers = Pointers(*arrays(list(range(100, 115)), [0] * 15, [50] * 15))
    pending = [Entry(ENTRY_RANGE, 10, 0, 0, 12), Entry(ENTRY_POINTERS, 50, -1, 0, 15, pack_pointers(timers))]
    offsets: list[int] = []
    queue_offsets: list[int] = []
    now, rounds = 10_000, 0
    while pending:
        fired = fire(pending, now, burst_cap=10)
        assert sum(r[2] for r in fired.ranges) + len(fired.pointers) <= 10
        queue_offsets += [o for _, first, count, _ in fired.ranges for o in range(first, first + count)]
        offsets += fired.pointers.commitlog_offsets.tolist()
        pending = fired.keep
        when = next_timer(pending, now)
        assert when is None or when == now + 1  # re-armed at once for the rest
        now, rounds = now + 1, rounds + 1
    assert queue_offsets == list(range(12)) and offsets == list(range(100, 115)) and rounds == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 1), st.integers(0, 3)), max_size=60),
    st.integers(0, 6000),
    st.integers(1, 20),
)
def test_fire_never_emits_early_and_partitions_the_input(
    raw: list[tuple[int, int, int]], now: int, cap: int
) -> None:
    n = len(raw)
    due = np.asarray([d for d, _, _ in raw], dtype=np.int64)
    kinds = np.asarray([k for _, k, _ in raw], dtype=np.int64)
    queues = np.where(kinds == KIND_LEVEL, np.asarray([q for _, _, q in raw], dtype=np.int64), -1)
    offsets = np.arange(n, dtype=np.int64)
    entries = entries_of(kinds, due, 1000 + offsets, offsets, queues, offsets, now_ms=0, roll_window_ms=3000)
    fired = fire(entries, now, cap)
    emitted = [o for _, first, count, _ in fired.ranges for o in range(first, first + count)]
    emitted += (fired.pointers.commitlog_offsets - 1000).tolist()
    kept = [o for e in fired.keep for o in _offsets(e)]
    assert sorted(emitted + kept) == list(range(n)) and len(emitted) <= cap
    actions = action_times(due, kinds, 0, 3000)
    assert all(actions[o] <= now for o in emitted)
    assert sum(count for count, _, _ in summarize(fired.keep).values()) == len(kept)
    when = next_timer(fired.keep, now)
    assert when is None or when > now


def _offsets(entry: Entry) -> list[int]:
    if entry.kind == ENTRY_RANGE:
        return list(range(entry.first_offset, entry.first_offset + entry.messages))
    return (unpack_pointers(entry.pointers or b"", entry.messages).commitlog_offsets - 1000).tolist()


# --- the processor, under TwsTester (state and timers in memory) ---------------------------------


def _input(rows: list[tuple[int, int, int, int, int, int]]) -> pd.DataFrame:
    names = ["kind", "due_ms", "commitlog_offset", "enqueue_ms", "src_queue", "src_queue_offset"]
    return pd.DataFrame(rows, columns=names)


def test_processor_delivers_a_bucket_as_one_range_when_its_timer_fires() -> None:
    tester = TwsTester(DelayResolver(DelaySettings(level_delays_ms=(1000,))), timeMode="ProcessingTime")
    key = (2000, 0)
    summary = tester.testInPandas(
        key, _input([(KIND_LEVEL, 1950 + i, 500 + i, 0, 0, 40 + i) for i in range(5)])
    )
    assert summary["row_type"].tolist() == [ROW_SUMMARY] and summary["pending"].tolist() == [5]
    assert tester.setProcessingTime(1999).empty  # the bucket's end is 2000
    out = tester.setProcessingTime(2000)
    relocations = out[out["row_type"] == ROW_RELOCATION]
    assert relocations[["queue_id", "queue_offset", "count", "kind"]].values.tolist() == [[0, 40, 5, 0]]
    assert out[out["row_type"] == ROW_SUMMARY]["pending"].tolist() == [0]
    assert tester.peekListState("entries", key) == []


def test_processor_carries_over_an_earlier_versions_pointers() -> None:
    """A checkpoint of the version with a list element per message: its pointers fire as before."""
    tester = TwsTester(DelayResolver(DelaySettings(level_delays_ms=(1000,))), timeMode="ProcessingTime")
    key = (5000, 1)
    assert [f.name for f in LEGACY_PENDING_SCHEMA.fields][:3] == ["commitlog_offset", "due_ms", "action_ms"]
    legacy = [(70, 4900, 4900, KIND_TIMER, 11, -1, 3), (60, 4800, 4800, KIND_LEVEL, 0, 0, 9)]
    tester.updateListState("pending", key, legacy)
    tester.testInPandas(key, _input([(KIND_TIMER, 4950, 80, 12, -1, 4)]))  # a new message, same key
    out = tester.setProcessingTime(5000)
    relocations = out[out["row_type"] == ROW_RELOCATION]
    assert relocations["commitlog_offset"].tolist() == [60, 70, 80] and relocations["count"].tolist() == [
        1,
        1,
        1,
    ]
    assert relocations["enqueue_ms"].tolist() == [0, 11, 12]
    assert tester.peekListState("pending", key) == [] and tester.peekListState("entries", key) == []


def test_processor_rolls_a_timer_due_past_the_roll_window_when_the_window_has_passed() -> None:
    tester = TwsTester(
        DelayResolver(DelaySettings(level_delays_ms=(1000,), roll_window_ms=2000)), timeMode="ProcessingTime"
    )
    key = (60_000, 0)
    tester.testInPandas(key, _input([(KIND_TIMER, 60_000, 70, 5, -1, 0)]))  # due 60 s ahead, window 2 s
    assert tester.setProcessingTime(1999).empty
    out = tester.setProcessingTime(2000)  # the roll timer, long before the bucket's end
    rows = out[out["row_type"] == ROW_RELOCATION]
    assert rows[["commitlog_offset", "kind", "due_ms"]].values.tolist() == [[70, 1, 60_000]]  # 1 = ROLL
    assert tester.peekListState("entries", key) == []


def test_processor_decides_a_window_ahead_with_the_due_time_as_dequeue_time() -> None:
    """With a look-ahead the key fires that long before its bucket's end; each DELIVER row says
    when it may go (its due time), which the broker's wheel keeps; what lies beyond the window
    waits for the next fire."""
    settings = DelaySettings(level_delays_ms=(1000,), lookahead_ms=3000)
    tester = TwsTester(DelayResolver(settings), timeMode="ProcessingTime")
    key = (10_000, 0)
    tester.testInPandas(key, _input([(KIND_LEVEL, 9950 + i, 500 + i, 0, 0, 40 + i) for i in range(3)]))
    tester.testInPandas(key, _input([(KIND_TIMER, 10_000, 900, 5, -1, 0)]))
    assert tester.setProcessingTime(6999).empty  # the bucket's end (10 000) less the look-ahead
    out = tester.setProcessingTime(7000)
    rows = out[out["row_type"] == ROW_RELOCATION]
    assert rows[["queue_id", "count", "kind", "dequeue_ms", "due_ms"]].values.tolist() == [
        [0, 3, 0, 9952, 9952],
        [-1, 1, 0, 10_000, 10_000],
    ]
    assert tester.peekListState("entries", key) == []


def test_processor_dequeue_time_of_an_overdue_row_is_the_batch_time() -> None:
    settings = DelaySettings(level_delays_ms=(1000,), lookahead_ms=3000)
    tester = TwsTester(DelayResolver(settings), timeMode="ProcessingTime")
    key = (2000, 0)
    tester.testInPandas(key, _input([(KIND_TIMER, 2000, 900, 5, -1, 0)]))
    out = tester.setProcessingTime(5000)  # overdue: goes at once
    rows = out[out["row_type"] == ROW_RELOCATION]
    assert rows[["kind", "dequeue_ms"]].values.tolist() == [[0, 5000]]


def test_look_ahead_is_capped_at_the_roll_window() -> None:
    """A look-ahead wider than the roll window decides no further ahead than the window: a timer
    whose roll leaves it more than the window away is rolled, not handed to the wheel; one the
    roll finds within the window is decided at T (its due time) instead of re-parked."""
    settings = DelaySettings(level_delays_ms=(1000,), roll_window_ms=2000, lookahead_ms=3000)
    assert settings.ahead_ms == 2000
    tester = TwsTester(DelayResolver(settings), timeMode="ProcessingTime")
    far, near = (5000, 0), (3900, 0)
    tester.testInPandas(far, _input([(KIND_TIMER, 4500, 70, 5, -1, 0)]))  # 4.5 s ahead: rolled at 2 s
    tester.testInPandas(near, _input([(KIND_TIMER, 3900, 71, 5, -1, 0)]))  # 3.9 s ahead: rolled at 2 s
    out = tester.setProcessingTime(2000)
    rows = out[out["row_type"] == ROW_RELOCATION].sort_values("commitlog_offset")
    # 1 = ROLL (4.5 s is beyond now + window); 0 = DELIVER at its due time (the wheel holds it).
    assert rows[["commitlog_offset", "kind", "dequeue_ms"]].values.tolist() == [[70, 1, 2000], [71, 0, 3900]]
