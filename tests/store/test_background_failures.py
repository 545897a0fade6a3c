"""Background failures are surfaced, never only logged: a failing flush or index thread makes
``MessageStore.health()`` say so, and a lookup that depends on the index waits for it or is
refused (``IndexBehind``); it never answers from a partial index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from store import IndexBehind, Message, MessageStore, ProducerRef, StoreNotWritable
from store.io.fs import FaultyFileSystem
from tests.support.stores import tiny_config
from tests.support.waiting import wait_until


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    config = tiny_config(
        tmp_path / "s", background_services=True, flush_interval_ms=20, index_lookup_wait_ms=300
    )
    with MessageStore.open(config) as opened:
        opened.create_topic("t", 2)
        yield opened


class FlakyIndex:
    """Makes the index thread's dispatch fail until :meth:`heal`."""

    def __init__(self, store: MessageStore) -> None:
        self.index = store._index_dispatcher.index  # type: ignore[union-attr]  # fault injection
        self.real = self.index.dispatch
        self.calls = 0
        self.index.dispatch = self._failing  # type: ignore[method-assign]

    def _failing(self, batch: Any) -> int:
        self.calls += 1
        raise OSError(28, "injected: no space left for the index")

    def heal(self) -> None:
        self.index.dispatch = self.real  # type: ignore[method-assign]


def _service(store: MessageStore, name: str) -> Any:
    return next(s for s in store.health().services if s.name == name)


def test_a_failing_index_thread_is_reported_and_lookups_are_refused(store: MessageStore) -> None:
    store.put_message(Message(topic="t", body=b"before", keys=("k0",)))
    assert store.wait_indexed(5)
    assert store.health().ok
    flaky = FlakyIndex(store)
    store.put_message(Message(topic="t", body=b"during", keys=("k1",)))
    wait_until(lambda: not store.health().ok, 5, "the index failure to show")
    index = _service(store, "index")
    assert not index.ok and index.failures >= 1 and "injected" in index.last_error
    assert not store.wait_indexed(0.2)  # the failed batch is not counted as indexed
    with pytest.raises(IndexBehind):
        store.query_by_key("t", "k1")
    wait_until(lambda: flaky.calls >= 2, 5, "the index thread to retry the failed batch")
    flaky.heal()
    wait_until(lambda: store.health().ok, 15, "the index to recover")
    assert [m.body for m in store.query_by_key("t", "k1")] == [b"during"]
    assert _service(store, "index").failures >= 2


def test_an_idempotent_retry_is_refused_while_the_index_is_behind_then_deduplicated(
    tmp_path: Path,
) -> None:
    """After a restart the producer table is empty, so a retry is recognised only through the
    index: while the index is failing the retry is refused (nothing written), once it works the
    retry returns the original result and writes nothing."""
    config = tiny_config(tmp_path / "s", background_services=True, index_lookup_wait_ms=300)
    ref = ProducerRef("producer-1", 7)
    with MessageStore.open(config) as first:
        first.create_topic("t", 1)
        (original,) = first.put_messages([Message(topic="t", body=b"once")], producer=ref)
    with MessageStore.open(config) as again:
        assert again.wait_indexed(5)
        flaky = FlakyIndex(again)
        again.put_message(Message(topic="t", body=b"unrelated"))  # now the index is behind
        with pytest.raises(IndexBehind):
            again.put_messages([Message(topic="t", body=b"once")], producer=ref)
        assert again.max_offset("t", 0) == 2
        flaky.heal()
        wait_until(lambda: again.health().ok, 15, "the index to recover")
        (retried,) = again.put_messages([Message(topic="t", body=b"once")], producer=ref)
        assert retried == original
        assert again.max_offset("t", 0) == 2


def test_a_failing_commitlog_flush_is_reported_until_it_heals(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    config = tiny_config(tmp_path / "s", background_services=True, flush_interval_ms=20)
    with MessageStore.open(config, fs=fs) as store:
        store.create_topic("t", 1)
        fs.fail_nth("fsync", 1, persistent=True)
        store.put_message(Message(topic="t", body=b"x"))
        wait_until(lambda: not _service(store, "flush-commitlog").ok, 5, "the flush failure to show")
        failing = store.health().failing()
        assert "flush-commitlog" in [s.name for s in failing]
        assert "No space left" in (_service(store, "flush-commitlog").last_error or "")
        fs.heal()
        wait_until(lambda: store.health().ok, 5, "the flush service to recover")


def test_a_consume_queue_file_that_cannot_be_created_refuses_the_put_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """The ConsumeQueue's files go through the file-system seam: a new queue file that cannot
    be created refuses the put (the CommitLog append is rolled back), and once the disk heals
    the same put works."""
    fs = FaultyFileSystem()
    with MessageStore.open(tiny_config(tmp_path / "s"), fs=fs) as store:
        store.create_topic("a", 1)
        store.create_topic("b", 1)
        store.put_message(Message(topic="a", body=b"first"))
        end = store.commitlog_max_offset
        fs.fail_nth("create", 1, persistent=True, only="/consumequeue/")
        with pytest.raises(StoreNotWritable):
            store.put_message(Message(topic="b", body=b"refused"))
        assert store.commitlog_max_offset == end
        assert store.max_offset("b", 0) == 0
        fs.heal()
        assert store.put_message(Message(topic="b", body=b"later")).queue_offset == 0
        assert [m.body for m in store.get_messages("b", 0, 0).messages] == [b"later"]


def test_a_failing_consume_queue_flush_is_reported(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    config = tiny_config(tmp_path / "s", background_services=True, flush_consume_queue_interval_ms=20)
    with MessageStore.open(config, fs=fs) as store:
        store.create_topic("t", 1)
        fs.fail_nth("fsync", 1, persistent=True, only="/consumequeue/")
        store.put_message(Message(topic="t", body=b"x"))
        wait_until(lambda: not _service(store, "flush-logics").ok, 5, "the ConsumeQueue flush failure")
        assert _service(store, "flush-commitlog").ok
        fs.heal()
        wait_until(lambda: store.health().ok, 5, "the ConsumeQueue flush to recover")


def test_an_index_file_that_cannot_be_created_holds_lookups_until_it_can(tmp_path: Path) -> None:
    """A full index file rolls to a new one; when the new file cannot be created the index
    thread reports it, keeps the batch and retries; lookups wait, then are refused."""
    fs = FaultyFileSystem()
    config = tiny_config(tmp_path / "s", background_services=True, index_lookup_wait_ms=300)
    with MessageStore.open(config, fs=fs) as store:
        store.create_topic("t", 1)
        fs.fail_nth("create", 1, persistent=True, only="/index/")
        store.put_message(Message(topic="t", body=b"k", keys=("needle",)))
        wait_until(lambda: not _service(store, "index").ok, 5, "the index failure to show")
        with pytest.raises(IndexBehind):
            store.query_by_key("t", "needle")
        fs.heal()
        wait_until(lambda: store.health().ok, 15, "the index to recover")
        assert [m.body for m in store.query_by_key("t", "needle")] == [b"k"]
