"""The exactly-once sink in a replica group: staged parts and decisions go into the CommitLog
(``rmq_sys_sink_staging``), so a member promoted by a failover commits a batch staged at the
old master, and finishes the old master's decision instead of deciding again.

A promotion is played on one store: closed (or abandoned, as by ``kill -9``) with its staging
directory removed, then opened again, which is what a slave holds: the log, not the files."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import SINK_STAGING_TOPIC, MessageStore, NotMaster
from store.publish.sink_log import SinkLog
from store.publish.sink_parts import Manifest, StagedPart, new_part_id, staging_root, write_part
from store.publish.sink_staging import SinkStaging
from tests.streaming.eo_helpers import assert_exactly_once, part_batch, small_config, topic_bodies

SINK = "replicated-sink"


class _Master:
    """Replication hooks of a master whose slaves ack at once: writes taken, the confirm
    offset (what readers see) following every append."""

    def __init__(self, store: MessageStore) -> None:
        self.replica = store.replica_log()

    def check_writable(self) -> None:
        return None

    def appended(self, end_offset: int) -> None:
        return None

    def acknowledge(self, end_offset: int) -> None:
        self.replica.advance_confirm(end_offset)


def _open(store_dir: Path) -> MessageStore:
    ms = MessageStore.open(small_config(store_dir, background_services=False, replicated=True))
    replica = ms.replica_log()
    replica.advance_confirm(ms.commitlog_max_offset)
    replica.set_hooks(_Master(ms))
    return ms


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "member"


def _payload(tmp_path: Path, bodies: list[bytes]) -> bytes:
    path = tmp_path / f"upload-{len(list(tmp_path.iterdir()))}.arrow"
    write_part(path, [part_batch(bodies)])
    return path.read_bytes()


def _bodies(lo: int, hi: int) -> list[bytes]:
    return [b"row-%06d" % i for i in range(lo, hi)]


def _promote(store_dir: Path) -> Iterator[MessageStore]:
    """The member that takes over: the same log, none of the old master's staging files."""
    shutil.rmtree(staging_root(store_dir), ignore_errors=True)
    ms = _open(store_dir)
    try:
        yield ms
    finally:
        ms.close()


def test_a_part_is_logged_in_pieces_and_read_back_whole(store_dir: Path, tmp_path: Path) -> None:
    with _open(store_dir) as ms:
        sink_log = SinkLog(ms)
        sink_log.piece_bytes = 1000
        payload = _payload(tmp_path, _bodies(0, 400))
        sink_log.put_part(SINK, 3, "p1", payload)
        assert sink_log.read_part(SINK, 3, "p1") == payload
        assert sink_log.read_part(SINK, 3, "p2") is None and sink_log.read_part(SINK, 4, "p1") is None
        pieces = ms.get_messages(SINK_STAGING_TOPIC, 0, 0, 100).messages
        assert len(pieces) == -(-len(payload) // 1000)
        assert pieces[0].uniq_key == f"sink:{SINK}:3:part:p1:0"
        assert {p.properties["SINK_PIECES"] for p in pieces} == {str(len(pieces))}


def test_a_batch_staged_at_a_master_that_died_commits_at_its_successor(
    store_dir: Path, tmp_path: Path
) -> None:
    """Spark's tasks staged at the old master; the driver's commit reaches the new one (it
    used to answer 409 sink_staging_error "staged part ... is missing" and kill the query)."""
    bodies = _bodies(0, 50)
    with _open(store_dir) as ms:
        staged = SinkStaging(ms).stage_part(SINK, 0, new_part_id(0, 0), _payload(tmp_path, bodies))
        ms.abandon()  # kill -9 before the commit
    for ms in _promote(store_dir):
        outcome = SinkStaging(ms).commit(SINK, 0, [staged])
        assert outcome.decided_now and outcome.rows == 50
        assert_exactly_once(topic_bodies(ms, "out"), bodies)


class _Crash(Exception):
    pass


def test_a_decision_half_published_by_a_dead_master_is_finished_not_decided_again(
    store_dir: Path, tmp_path: Path
) -> None:
    """The old master decided batch 0 and died after its first chunk. Spark replays the batch
    at the new master with other parts (another attempt, the rows in another order): the new
    master publishes the old decision's rows, each once. Deciding again, chunk 0 of the
    replay would be taken for stored (its UNIQ_KEYs are the batch's) and its rows lost,
    while the old chunk 0's rows came again in later chunks."""
    bodies = _bodies(0, 20)

    def crash_after_first_chunk(event: str) -> None:
        if event == "chunk-0":
            raise _Crash(event)

    with _open(store_dir) as ms:
        staging = SinkStaging(ms, chunk_rows=5, on_event=crash_after_first_chunk)
        staged = staging.stage_part(SINK, 0, new_part_id(0, 0), _payload(tmp_path, bodies))
        with pytest.raises(_Crash):
            staging.commit(SINK, 0, [staged])
        ms.abandon()
    for ms in _promote(store_dir):
        staging = SinkStaging(ms, chunk_rows=5)
        replay = staging.stage_part(SINK, 0, new_part_id(0, 1), _payload(tmp_path, bodies[::-1]))
        outcome = staging.commit(SINK, 0, [replay])
        assert not outcome.decided_now and outcome.rows == 20
        assert_exactly_once(topic_bodies(ms, "out"), bodies)
        assert staging.commit(SINK, 0, [replay]).already_published


def test_a_lone_store_keeps_staging_in_files_only(tmp_path: Path) -> None:
    with MessageStore.open(small_config(tmp_path / "lone", background_services=False)) as ms:
        staging = SinkStaging(ms)
        assert staging.log is None
        staged = staging.stage_part(SINK, 0, new_part_id(0, 0), _payload(tmp_path, _bodies(0, 3)))
        staging.commit(SINK, 0, [staged])
        assert (
            SINK_STAGING_TOPIC not in ms.topics(include_system=True)
            or not ms.queue_offsets(SINK_STAGING_TOPIC).get(0, (0, 0))[1]
        )


def test_a_member_that_is_not_the_master_refuses_to_stage_and_to_decide(
    store_dir: Path, tmp_path: Path
) -> None:
    """Only a group's master stages and decides (a retriable NotMaster otherwise, which the
    sink's client answers by going to the group's next member): a part staged in a fenced
    master's files only, then committed at the new master, was missing there (the all-faults
    Jepsen run's one sink_staging_error)."""
    bodies = _bodies(0, 3)
    with _open(store_dir) as ms:
        staged = SinkStaging(ms).stage_part(SINK, 0, new_part_id(0, 0), _payload(tmp_path, bodies))
    ms = MessageStore.open(small_config(store_dir, background_services=False, replicated=True))  # no role
    with ms:
        staging = SinkStaging(ms)
        with pytest.raises(NotMaster):
            staging.stage_part(SINK, 0, new_part_id(1, 0), _payload(tmp_path, bodies))
        with pytest.raises(NotMaster):
            staging.commit(SINK, 0, [staged])
        assert staging.log is not None and staging.log.decision(SINK, 0) is None
    with _open(store_dir) as ms:  # master again: the refused commit decided nothing
        outcome = SinkStaging(ms).commit(SINK, 0, [staged])
        assert outcome.decided_now and outcome.rows == 3
        assert_exactly_once(topic_bodies(ms, "out"), bodies)


def test_a_decision_record_golden(store_dir: Path) -> None:
    """The decision record's body is the manifest's JSON, keys sorted, compact separators off
    (``json.dumps`` defaults), with the UNIQ_KEY ``sink:<sink>:<batch>:decision``."""
    manifest = Manifest(SINK, 7, (StagedPart("p00001-a0-0-abc", 12),), 65536)
    with _open(store_dir) as ms:
        SinkLog(ms).put_decision(manifest)
        (record,) = ms.get_messages(SINK_STAGING_TOPIC, 0, 0, 10).messages
        assert record.uniq_key == "sink:replicated-sink:7:decision"
        assert record.body == (
            b'{"batch_id": 7, "chunk_rows": 65536, "parts": [{"part_id": "p00001-a0-0-abc", "rows": 12}], '
            b'"sink_id": "replicated-sink"}'
        )
        assert SinkLog(ms).decision(SINK, 7) == manifest
