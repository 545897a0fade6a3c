"""Rows grouped by queue on the put path (``queue_groups``) and what is built on it: the queue
offsets of a batch and the last offset per queue, against plain-Python references."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from store.commitlog.dispatch_batch import queue_groups
from store.write.queue_offsets import last_per_queue

#: (topic code, queue id) rows: small ids (16-bit keys, radix sort) and large ones (64-bit keys).
ROWS = st.one_of(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 15)), max_size=60),
    st.lists(st.tuples(st.integers(0, 300), st.integers(0, 70_000)), max_size=60),
    st.lists(st.tuples(st.just(0), st.integers(0, 65_535)), max_size=60),
)


def arrays(rows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r[0] for r in rows], dtype=np.int32), np.array([r[1] for r in rows], dtype=np.int32)


@given(ROWS)
def test_groups_are_the_queues_in_key_order_with_rows_in_their_order(rows: list[tuple[int, int]]) -> None:
    codes, queues = arrays(rows)
    order, starts = queue_groups(codes, queues)
    expected: dict[tuple[int, int], list[int]] = {}
    for row, key in enumerate(rows):
        expected.setdefault(key, []).append(row)
    bounds = [*starts.tolist(), len(rows)]
    groups = [order[a:b].tolist() for a, b in itertools.pairwise(bounds)] if rows else []
    assert groups == [expected[key] for key in sorted(expected)]


@given(ROWS)
def test_last_per_queue_is_each_queues_last_value(rows: list[tuple[int, int]]) -> None:
    codes, queues = arrays(rows)
    values = np.arange(len(rows), dtype=np.int64) * 10
    expected = {key: row * 10 for row, key in enumerate(rows)}
    got = last_per_queue(codes, queues, values)
    assert {(code, qid): last for code, qid, last in got} == expected
    assert len(got) == len(expected)
