"""Idempotent produce: retries return the original results, across restarts and torn writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from store import InvalidArgument, Message, MessageStore, ProducerRef
from store.write.idempotence import ProducerTable, request_uniq_keys
from tests.support.stores import ManualClock, tiny_config

OpenStore = Callable[..., MessageStore]


def _msgs(n: int, tag: str = "x") -> list[Message]:
    return [Message(topic="t", body=b"%s-%d" % (tag.encode(), i), queue_id=i % 2) for i in range(n)]


def test_request_uniq_keys_are_deterministic_and_distinct() -> None:
    a = request_uniq_keys(ProducerRef("p", 1), 3)
    assert a == request_uniq_keys(ProducerRef("p", 1), 3)
    assert (
        len({*a, *request_uniq_keys(ProducerRef("p", 2), 3), *request_uniq_keys(ProducerRef("q", 1), 3)}) == 9
    )
    assert all(len(k) == 32 and k == k.upper() for k in a)


def test_retry_returns_original_results(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    ref = ProducerRef("producer-1", 7)
    first = ms.put_messages(_msgs(5), producer=ref)
    again = ms.put_messages(_msgs(5), producer=ref)
    assert again == first
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 5
    nxt = ms.put_messages(_msgs(2, "y"), producer=ProducerRef("producer-1", 8))
    assert nxt[0].queue_offset == 3  # queue 0 had offsets 0, 1, 2


def test_retry_after_restart_and_cache_eviction(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.create_topic("t", 2)
    ref = ProducerRef("http:order-42")
    first = ms.put_messages(_msgs(3), producer=ref)
    batch_ref = ProducerRef("sink/3/0", 0)
    batch = ms.put_batch("t", [b"a", b"b", b"c"], queue_ids=1, producer=batch_ref)
    ms.close()
    ms = MessageStore.open(cfg, clock_ms=clock)  # empty in-memory table: found through the index
    assert ms.put_messages(_msgs(3), producer=ref) == first
    again = ms.put_batch("t", [b"a", b"b", b"c"], queue_ids=1, producer=batch_ref)
    assert again.queue_offsets.tolist() == batch.queue_offsets.tolist()
    assert again.commitlog_offsets.tolist() == batch.commitlog_offsets.tolist()
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 6
    ms.abandon()
    ms = MessageStore.open(cfg, clock_ms=clock)  # and after a crash
    assert ms.put_messages(_msgs(3), producer=ref) == first
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 6
    ms.close()


def test_retries_of_several_requests_after_restart_write_nothing(tmp_path: Path, clock: ManualClock) -> None:
    """Found duplicates must not make later (higher-sequence) retries look new."""
    cfg = tiny_config(tmp_path)
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.create_topic("t", 2)
    originals = [ms.put_messages(_msgs(2, f"s{s}"), producer=ProducerRef("pipelined", s)) for s in range(5)]
    ms.close()
    ms = MessageStore.open(cfg, clock_ms=clock)
    for sequence in (2, 3, 4, 0, 1):  # retried out of order, as a pipelining client may
        assert (
            ms.put_messages(_msgs(2, f"s{sequence}"), producer=ProducerRef("pipelined", sequence))
            == originals[sequence]
        )
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 10
    ms.close()


def test_torn_request_is_completed_by_the_retry(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tiny_config(tmp_path, commitlog_file_size_bytes=1 << 20)
    ms = MessageStore.open(cfg, clock_ms=clock)
    ms.create_topic("t", 1)
    ref = ProducerRef("p", 1)
    msgs = [Message(topic="t", body=b"m%d" % i, queue_id=0) for i in range(10)]
    first = ms.put_messages(msgs, producer=ref)
    ms.abandon()
    tear_at = first[6].commitlog_offset  # the crash kept messages 0-5 only
    log_file = next((tmp_path / "commitlog").iterdir())
    with open(log_file, "r+b") as f:
        f.seek(tear_at)
        f.write(b"\0" * (first[-1].commitlog_offset + first[-1].size_bytes - tear_at))
    ms = MessageStore.open(cfg, clock_ms=clock)
    assert ms.max_offset("t", 0) == 6
    retried = ms.put_messages(msgs, producer=ref)
    assert retried[:6] == first[:6]
    assert [r.queue_offset for r in retried] == list(range(10))
    bodies = ms.read_batch("t", 0, 0, 100).batch.column("body").to_pylist()
    assert bodies == [b"m%d" % i for i in range(10)]
    ms.close()


def test_concurrent_retries_write_once(open_store: OpenStore) -> None:
    ms = open_store()
    ms.create_topic("t", 2)
    ref = ProducerRef("racy", 1)
    results: list[object] = []
    threads = [
        threading.Thread(target=lambda: results.append(ms.put_messages(_msgs(4), producer=ref)))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == results[0] for r in results)
    assert ms.max_offset("t", 0) + ms.max_offset("t", 1) == 4


def test_bad_producer_refs_are_refused(open_store: OpenStore) -> None:
    ms = open_store()
    with pytest.raises(InvalidArgument):
        ms.put_messages(_msgs(1), producer=ProducerRef("", 0))
    with pytest.raises(InvalidArgument):
        ms.put_messages(_msgs(1), producer=ProducerRef("p", -1))


def test_producer_table_is_bounded() -> None:
    table = ProducerTable(max_producers=3, requests_per_producer=2)
    for p in range(10):
        for s in range(5):
            table.remember(ProducerRef(f"p{p}", s), [s])
    assert len(table) == 3
    assert table.recent(ProducerRef("p9", 4)) == [4]
    assert table.recent(ProducerRef("p9", 2)) is None  # only the last two requests are kept
    assert table.recent(ProducerRef("p0", 4)) is None  # least recently used producer evicted
