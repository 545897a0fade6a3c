"""The delay wheel's records (store.publish.due_records): golden bytes, round trips, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from store import StoreError
from store.publish.due_records import (
    REQUEST_DTYPE,
    Decision,
    DueRecordError,
    Progress,
    decision_uniq_key,
    decode_decision,
    decode_progress,
    encode_decision,
    encode_progress,
)

GOLDEN_DECISION = bytes.fromhex(
    "53514457" "01" "00"            # magic "SQDW", version 1, type DECISION
    "00000000000007d0"              # due_ms 2000
    "0000000000000005"              # batch_id 5
    "00000001" "00000002"           # part 1, 2 requests
    "0005" "64656c6179"             # operator "delay"
    # a timer message: CommitLog offset 4096, DELIVER, enqueue 1000, dequeue 2000, no range
    "0000000000001000" "00" "00000000000003e8" "00000000000007d0"
    "ffffffff" "ffffffffffffffff" "0000000000000001"
    # a range: SCHEDULE_TOPIC_XXXX queue 2, 3 offsets from 7
    "ffffffffffffffff" "00" "0000000000000000" "00000000000007d0"
    "00000002" "0000000000000007" "0000000000000003"
)  # fmt: skip
GOLDEN_PROGRESS = bytes.fromhex(
    "53514457" "01" "01"            # magic, version, type PROGRESS
    "0000000000000003"              # watermark 3
    "00000002" "0000000000000005" "0000000000000009"  # 2 published above it: 5 and 9
)  # fmt: skip


def _requests() -> np.ndarray:
    rows = np.zeros(2, dtype=REQUEST_DTYPE)
    rows[0] = (4096, 0, 1000, 2000, -1, -1, 1)
    rows[1] = (-1, 0, 0, 2000, 2, 7, 3)
    return rows


def test_decision_golden_bytes() -> None:
    decision = Decision("delay", 5, 1, 2000, _requests())
    assert encode_decision(decision) == GOLDEN_DECISION
    back = decode_decision(GOLDEN_DECISION)
    assert (back.operator, back.batch_id, back.part, back.due_ms) == ("delay", 5, 1, 2000)
    assert back.requests.tolist() == _requests().tolist()
    assert decision_uniq_key("delay", 5, 1) == "wheel:delay:5:1"


def test_progress_golden_bytes() -> None:
    assert encode_progress(Progress(3, (9, 5))) == GOLDEN_PROGRESS
    back = decode_progress(GOLDEN_PROGRESS)
    assert back == Progress(3, (5, 9))
    assert back.published(2) and back.published(5) and not back.published(4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "too short"),
        (b"XXXX\x01\x00" + GOLDEN_DECISION[6:], "not a wheel record"),
        (GOLDEN_DECISION[:4] + b"\x02" + GOLDEN_DECISION[5:], "not a wheel record"),
        (GOLDEN_DECISION[:-1], "header says"),
        (GOLDEN_DECISION[:20], "cut in its header"),
        (GOLDEN_PROGRESS, "progress record where"),
    ],
)
def test_bad_decision_bytes_are_refused(body: bytes, message: str) -> None:
    with pytest.raises(DueRecordError, match=message):
        decode_decision(body)
    assert issubclass(DueRecordError, StoreError)


def test_bad_progress_bytes_are_refused() -> None:
    with pytest.raises(DueRecordError, match="for 2 offsets"):
        decode_progress(GOLDEN_PROGRESS + b"\x00")
    with pytest.raises(DueRecordError, match="decision record where"):
        decode_progress(GOLDEN_DECISION)


@given(
    st.lists(
        st.tuples(
            st.integers(-1, 2**62), st.integers(0, 2), st.integers(0, 2**50), st.integers(0, 2**50),
            st.integers(-1, 17), st.integers(-1, 2**40), st.integers(1, 2**20),
        ),
        max_size=20,
    ),
    st.integers(0, 2**50),
    st.text(alphabet="abcdefghij_-", min_size=1, max_size=20),
)  # fmt: skip
def test_decision_round_trip(rows: list[tuple[int, ...]], due: int, operator: str) -> None:
    requests = np.array(rows, dtype=REQUEST_DTYPE) if rows else np.zeros(0, dtype=REQUEST_DTYPE)
    back = decode_decision(encode_decision(Decision(operator, 3, 0, due, requests)))
    assert back.requests.tolist() == requests.tolist() and back.due_ms == due and back.operator == operator
