"""The record checkers agree: one verdict (first bad position, reason) for the same bytes.

Three callers judge records: the scalar :func:`check_record` (single reads, walking a file),
:func:`validate_run` (CommitLog scans: recovery and dispatch) and
:func:`decode_records_to_arrow` (every read). The last two run the vectorised
:func:`check_records`; random runs of records with random damage must get the same verdict
from all of them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from store.errors import CorruptStore
from store.format.batch_decode import decode_int_field, decode_records_to_arrow
from store.format.record import BODY_POS, SYS_FLAG_POS, RecordFields, encode_blank, encode_record
from store.format.record_check import RecordStatus, Verdict, check_record, check_records
from store.format.record_scan import validate_run
from store.format.vocabulary import SYSFLAG_COMPRESSED

TOPICS = ["a", "orders", "t" * 140, "caf\u00e9"]
PROPERTIES = [{}, {"TAGS": "x"}, {"KEYS": "k1 k2", "UNIQ_KEY": "U" * 32}, {"a": "b", "TAGS": "tag"}]


@st.composite
def damaged_runs(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(1, 12))
    same = draw(st.booleans())  # one layout: exercises the strided walk
    records = []
    for i in range(count):
        body = bytes([i]) * 20 if same else draw(st.binary(max_size=60))
        topic = TOPICS[0] if same else draw(st.sampled_from(TOPICS))
        props = PROPERTIES[1] if same else draw(st.sampled_from(PROPERTIES))
        records.append(encode_record(RecordFields(topic, body, queue_offset=i, properties=props)))
    data = bytearray(b"".join(records))
    tail = draw(st.sampled_from(["none", "blank", "zeros", "garbage"]))
    if tail == "blank":
        data += encode_blank(200) + bytes(192)
    elif tail == "zeros":
        data += bytes(draw(st.integers(1, 120)))
    elif tail == "garbage":
        data += draw(st.binary(min_size=1, max_size=120))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["flip", "zero", "truncate"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "zero":
            data[at : at + draw(st.integers(1, 16))] = bytes(min(16, len(data) - at))[
                : len(data[at : at + 16])
            ]
        else:
            del data[at:]
            if not data:
                data = bytearray(b"\x00")
    return bytes(data)


def scalar_walk(data: bytes, check_crc: bool) -> tuple[list[int], int, Verdict]:
    """Positions of the valid records from 0, then where and why the walk stopped."""
    position, valid = 0, []
    while True:
        check = check_record(data, position, check_crc)
        if check.status is not RecordStatus.OK:
            return valid, position, check.verdict
        valid.append(position)
        position += check.size


@settings(max_examples=300, deadline=None)
@given(data=damaged_runs(), check_crc=st.booleans())
def test_scan_and_scalar_checkers_agree(data: bytes, check_crc: bool) -> None:
    valid, stop, verdict = scalar_walk(data, check_crc)
    run = validate_run(data, check_crc)
    assert run.starts.tolist() == valid
    assert run.end == stop
    scan_verdict = (
        run.verdict if run.verdict is not Verdict.OK else check_record(data, run.end, check_crc).verdict
    )
    assert scan_verdict == verdict


@settings(max_examples=300, deadline=None)
@given(data=damaged_runs())
def test_decode_and_scalar_checkers_agree(data: bytes) -> None:
    valid, stop, verdict = scalar_walk(data, check_crc=False)
    arr = np.frombuffer(data, dtype=np.uint8)
    spans = check_records(arr, np.array([*valid, stop], dtype=np.int64))
    if verdict is not Verdict.TOPIC_NOT_UTF8:  # topics are the caller's part (with_topic_verdict)
        assert (spans.valid, spans.verdict) == (len(valid), verdict)
    # a flipped SYSFLAG can mark a body compressed: decoding then fails past the checker
    assume(not (decode_int_field(arr, valid, SYS_FLAG_POS) & SYSFLAG_COMPRESSED).any())
    if verdict is Verdict.END and stop + 8 > len(data):  # the walk ran out of bytes: no bad record
        if valid:
            assert decode_records_to_arrow(arr, valid).num_rows == len(valid)
        return
    with pytest.raises(CorruptStore, match=f"position {stop}: {verdict.reason}"):
        decode_records_to_arrow(arr, [*valid, stop])


def test_a_short_tail_runs_past_the_end_in_every_checker() -> None:
    record = encode_record(RecordFields("t", b"x" * 10))
    data = record + b"\x01" * 40  # not even a header's worth of bytes
    assert check_record(data, len(record), check_crc=True).verdict is Verdict.PAST_END
    assert validate_run(data, check_crc=True).end == len(record)
    with pytest.raises(CorruptStore, match="past the end"):
        decode_records_to_arrow(np.frombuffer(data, np.uint8), [0, len(record)])


def test_crc_is_checked_before_the_topic() -> None:
    record = bytearray(encode_record(RecordFields("ab", b"body")))
    record[BODY_POS] ^= 1  # body: CRC mismatch
    record[BODY_POS + 4 + 1] = 0xFF  # first topic byte: not UTF-8
    assert check_record(bytes(record), 0, check_crc=True).verdict is Verdict.BODY_CRC
    assert validate_run(bytes(record), check_crc=True).verdict is Verdict.BODY_CRC
    assert check_record(bytes(record), 0, check_crc=False).verdict is Verdict.TOPIC_NOT_UTF8
    assert validate_run(bytes(record), check_crc=False).verdict is Verdict.TOPIC_NOT_UTF8
