"""The epoch file: RocketMQ's text format (golden file), Kafka's write discipline (a torn temporary
file is ignored), the append rules, and the consistent point, by example and as a Hypothesis model
of failovers in which every replica that syncs ends up a prefix of its master."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.ha import EPOCH_FILE_NAME, EpochEntry, EpochFile, EpochFileCorrupt, EpochNotIncreasing
from store.ha.epoch_file import (
    decode_epoch_file,
    encode_epoch_file,
    end_offsets,
    entry_for_offset,
    find_consistent_point,
)

# CheckpointFile.java's own example (lines 38-42): 2 entries, CRC 773307083.
ROCKETMQ_EXAMPLE = b"2\n773307083\n7-7000\n8-8000\n"


def test_golden_file_is_rocketmqs_example() -> None:
    entries = [EpochEntry(7, 7000), EpochEntry(8, 8000)]
    assert encode_epoch_file(entries) == ROCKETMQ_EXAMPLE
    assert decode_epoch_file(ROCKETMQ_EXAMPLE) == entries
    assert encode_epoch_file([]) == b"0\n0\n"  # what RocketMQ reads as "no entries"
    assert decode_epoch_file(b"0\n0\n") == []


def test_crc_zero_is_not_checked_as_in_rocketmq() -> None:
    assert decode_epoch_file(b"2\n0\n7-7000\n8-8000\n") == [EpochEntry(7, 7000), EpochEntry(8, 8000)]


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"3\n773307083\n7-7000\n8-8000\n", "expected 3 entries"),
        (b"2\n773307084\n7-7000\n8-8000\n", "CRC"),
        (b"2\n773307083\n7-7000\n8-8001\n", "CRC"),
        (b"1\n0\n7:7000\n", "bad entry line"),
        (b"2\n0\n8-8000\n7-7000\n", "does not follow"),
        (b"2\n0\n7-7000\n8-7000\n", "does not follow"),
        (b"2\n773307083\n7-7000\n8-8000", "count line"),  # torn: last line cut
        (b"", "count line"),
    ],
)
def test_damaged_files_are_refused(data: bytes, why: str) -> None:
    with pytest.raises(EpochFileCorrupt, match=why):
        decode_epoch_file(data)


def test_file_appends_and_truncates_durably(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path)
    assert (tmp_path / EPOCH_FILE_NAME).read_bytes() == b"0\n0\n"
    assert epochs.last_epoch == -1
    epochs.append(EpochEntry(7, 7000))
    epochs.append(EpochEntry(8, 8000))
    assert (tmp_path / EPOCH_FILE_NAME).read_bytes() == ROCKETMQ_EXAMPLE
    assert EpochFile(tmp_path).entries == (EpochEntry(7, 7000), EpochEntry(8, 8000))
    for bad in (EpochEntry(8, 9000), EpochEntry(9, 8000), EpochEntry(6, 9000)):
        with pytest.raises(EpochNotIncreasing):
            epochs.append(bad)
    assert epochs.truncate_suffix_by_offset(8000) == (EpochEntry(8, 8000),)
    assert EpochFile(tmp_path).entries == (EpochEntry(7, 7000),)
    epochs.append(EpochEntry(9, 7500))
    assert epochs.truncate_suffix_by_epoch(9) == (EpochEntry(9, 7500),)
    assert epochs.reconcile(6999) == (EpochEntry(7, 7000),)  # starts past the log's end
    assert epochs.entries == ()
    assert EpochFile(tmp_path).entries == ()


def test_torn_temporary_file_is_ignored_and_removed(tmp_path: Path) -> None:
    epochs = EpochFile(tmp_path)
    epochs.append(EpochEntry(1, 0))
    epochs.append(EpochEntry(2, 4096))
    # A crash in the middle of the next rewrite: the temporary file is torn, the rename never ran.
    torn = tmp_path / f".{EPOCH_FILE_NAME}.deadbeef.tmp"
    torn.write_bytes(b"3\n12345\n1-0\n2-40")
    reopened = EpochFile(tmp_path)
    assert reopened.entries == (EpochEntry(1, 0), EpochEntry(2, 4096))
    assert not torn.exists()


def test_entry_for_offset_and_ends() -> None:
    entries = (EpochEntry(1, 0), EpochEntry(3, 100), EpochEntry(4, 250))
    assert end_offsets(entries, 300) == [100, 250, 300]
    assert entry_for_offset(entries, 0) == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert entry_for_offset(entries, 99) == (EpochEntry(1, 0), EpochEntry(3, 100))
    assert entry_for_offset(entries, 100) == (EpochEntry(3, 100), EpochEntry(4, 250))
    assert entry_for_offset(entries, 10**9) == (EpochEntry(4, 250), None)
    assert entry_for_offset((EpochEntry(2, 50),), 10) is None


def test_consistent_point_examples() -> None:
    e = EpochEntry
    master = [e(1, 0), e(2, 1000), e(4, 1800)]
    # a lagging slave: same epochs, shorter log -> no truncation needed (its end)
    assert find_consistent_point([e(1, 0)], 600, master, 2500) == 600
    # a returning old master of epoch 2 that wrote past 1800 -> cut where epoch 2 ended on the master
    assert find_consistent_point([e(1, 0), e(2, 1000)], 2100, master, 2500) == 1800
    # it also led epoch 3 (never replicated) -> epoch 3 is unknown to the master, cut at epoch 2's end
    assert find_consistent_point([e(1, 0), e(2, 1000), e(3, 2000)], 2600, master, 2500) == 1800
    # same epoch number with another start offset does not count
    assert find_consistent_point([e(1, 0), e(2, 1200)], 1500, master, 2500) == 1000
    # nothing in common
    assert find_consistent_point([e(5, 0)], 100, master, 2500) is None
    assert find_consistent_point([], 0, master, 2500) is None


# --- a Hypothesis model of failovers ----------------------------------------------------------


@dataclass
class Replica:
    #: One token per CommitLog byte: (epoch that wrote it, serial); equal logs = equal lists.
    tokens: list[tuple[int, int]] = field(default_factory=list)
    entries: list[EpochEntry] = field(default_factory=list)


def _elect(replica: Replica, epoch: int) -> None:
    """become_master: drop epochs that wrote nothing, append (epoch, log end)."""
    end = len(replica.tokens)
    replica.entries = [x for x in replica.entries if x.start_offset < end]
    replica.entries.append(EpochEntry(epoch, end))


def _sync(slave: Replica, master: Replica, count: int) -> None:
    """Handshake (truncate at the consistent point), then copy ``count`` bytes as frames do."""
    if slave.entries:
        point = find_consistent_point(slave.entries, len(slave.tokens), master.entries, len(master.tokens))
        if point is None:  # no epoch in common (an unclean history): rebuilt from scratch
            slave.tokens, slave.entries = [], []
        else:
            del slave.tokens[point:]
            slave.entries = [x for x in slave.entries if x.start_offset < point]
    start = len(slave.tokens)
    for position in range(start, min(start + count, len(master.tokens))):
        found = entry_for_offset(master.entries, position)
        assert found is not None
        entry = found[0]
        if not slave.entries or slave.entries[-1].epoch < entry.epoch:
            slave.entries.append(entry)
        slave.tokens.append(master.tokens[position])


steps = st.lists(
    st.tuples(
        st.sampled_from(["elect", "write", "sync"]),
        st.integers(0, 2),
        st.integers(0, 2),
        st.integers(0, 12),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_any_failover_sequence_keeps_synced_replicas_prefixes_of_their_master(plan: list) -> None:  # type: ignore[type-arg]
    replicas = [Replica() for _ in range(3)]
    master, epoch, serial = 0, 1, 0
    _elect(replicas[0], epoch)
    for action, a, b, n in plan:
        if action == "elect":  # any replica, even an unclean one: epochs must still keep logs apart
            epoch += 1
            master = a
            _elect(replicas[master], epoch)
        elif action == "write":
            for _ in range(n):
                serial += 1
                replicas[master].tokens.append((epoch, serial))
        elif b != master:
            slave = replicas[b]
            _sync(slave, replicas[master], n)
            assert slave.tokens == replicas[master].tokens[: len(slave.tokens)]
            assert [x for x in replicas[master].entries if x.start_offset < len(slave.tokens)] == [
                x for x in slave.entries if x.start_offset < len(slave.tokens)
            ]
