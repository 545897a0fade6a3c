"""Golden bytes of the POP state record (broker/pop/state_codec.py) and its refusals."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.pop.state_codec import (
    CURSOR,
    ENTRY,
    Cursor,
    Entry,
    GroupSettings,
    Kind,
    Source,
    StateRecord,
    StateRecordCorrupt,
    decode,
    encode,
    read_snapshot_mark,
    snapshot_mark,
)

RECEIVE = StateRecord(
    Kind.RECEIVE,
    0x0102030405060708,
    "g",
    "t",
    (Cursor(Source.TOPIC, 1, 5),),
    (Entry(Source.RETRY, 2, 7, 3, 0xAABBCCDDEEFF0011, 1000, 900),),
)

GOLDEN = bytes.fromhex(
    "5053"  # magic 'PS'
    "01"  # version
    "01"  # kind RECEIVE
    "0102030405060708"  # time_ms
    "0001"
    "67"  # group 'g'
    "0001"
    "74"  # topic 't'
    "0001"  # one cursor
    "00"
    "00000001"
    "0000000000000005"  # source TOPIC, queue 1, next offset 5
    "00000001"  # one entry
    "01"
    "00000002"
    "0000000000000007"  # source RETRY, queue 2, queue offset 7
    "0003"  # attempt 3
    "aabbccddeeff0011"  # generation
    "00000000000003e8"  # visible at 1000
    "0000000000000384"  # popped at 900
    "0000"  # no tail
)


def test_receive_record_golden_bytes() -> None:
    assert CURSOR.size == 13 and ENTRY.size == 39
    assert encode(RECEIVE) == GOLDEN
    assert decode(GOLDEN) == RECEIVE


def test_config_and_snapshot_tails_golden_bytes() -> None:
    settings = GroupSettings(max_retries=16, start_newest=True, fifo=False)
    assert settings.encode() == bytes.fromhex("00100100")
    assert GroupSettings.decode(settings.encode()) == settings
    secret = bytes(range(32))
    mark = snapshot_mark(0x1234, 3, secret)
    assert mark == bytes.fromhex("000000000000123400000003") + secret
    assert read_snapshot_mark(mark) == (0x1234, 3, secret)
    record = StateRecord(Kind.CONFIG, 1, "grp", tail=settings.encode())
    assert encode(record) == bytes.fromhex("50530105000000000000000100036772700000000000000000000400100100")


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"XX" + b[2:],  # magic
        lambda b: b[:2] + b"\x02" + b[3:],  # version
        lambda b: b[:3] + b"\x63" + b[4:],  # unknown kind
        lambda b: b[:-1],  # truncated
        lambda b: b + b"\x00",  # trailing byte
        lambda b: b[:14] + b"\xff" + b[15:],  # group name length past the end
    ],
)
def test_damaged_records_are_refused(damage: Callable[[bytes], bytes]) -> None:
    with pytest.raises(StateRecordCorrupt):
        decode(damage(GOLDEN))


names = st.text(alphabet="abcXYZ_-%|09", max_size=40)
entries = st.builds(
    Entry,
    st.sampled_from(list(Source)),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**16 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
)
cursors = st.builds(
    Cursor, st.sampled_from(list(Source)), st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)
)


@given(
    kind=st.sampled_from(list(Kind)),
    time_ms=st.integers(-(2**63), 2**63 - 1),
    group=names,
    topic=names,
    cs=st.lists(cursors, max_size=5),
    es=st.lists(entries, max_size=5),
    tail=st.binary(max_size=64),
)
def test_round_trip(
    kind: Kind, time_ms: int, group: str, topic: str, cs: list[Cursor], es: list[Entry], tail: bytes
) -> None:
    record = StateRecord(kind, time_ms, group, topic, tuple(cs), tuple(es), tail)
    assert decode(encode(record)) == record
