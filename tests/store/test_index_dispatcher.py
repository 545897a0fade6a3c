"""The index thread (:class:`store.index.index_service.IndexDispatcher`): small batches wait a
moment for company and are indexed in one pass, and a lookup that needs the index ends that
wait at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store.commitlog.dispatch_batch import DispatchBatch
from store.index import index_service
from store.index.index_service import IndexDispatcher, IndexService
from tests.store.test_index_file import T0, FixedClock, make_batch
from tests.support.waiting import wait_until


@pytest.fixture
def dispatcher(tmp_path: Path) -> Iterator[IndexDispatcher]:
    service = IndexService(tmp_path / "index", slot_count=64, max_entries=1000, clock_ms=FixedClock(T0))
    threaded = IndexDispatcher(service, indexed_to=0)
    threaded.start()
    yield threaded
    threaded.stop()
    service.close()


def _batch(first: int, count: int) -> DispatchBatch:
    return make_batch([("t", 100 * i, T0, f"k{i}", None, 0) for i in range(first, first + count)])


def test_small_batches_dispatched_together_are_indexed_in_one_pass(
    dispatcher: IndexDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_service, "GATHER_S", 0.5)
    for first in range(0, 30, 10):  # three group commits of single produces, 20 ms apart
        dispatcher.dispatch(_batch(first, 10))
        time.sleep(0.02)
    wait_until(lambda: dispatcher.indexed_to == 3000, 10, "the three batches indexed")  # no waiter
    assert dispatcher.passes == 1
    assert dispatcher.index.query("t", "k29") == [2900]


def test_a_lookup_waiting_for_the_index_ends_the_wait_for_company(
    dispatcher: IndexDispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_service, "GATHER_S", 60.0)
    dispatcher.dispatch(_batch(0, 5))
    time.sleep(0.05)  # the thread has the batch and gathers
    assert dispatcher.indexed_to == 0
    assert dispatcher.wait_indexed(500, timeout_s=10)  # would time out waiting for the 60 s
    assert dispatcher.index.query("t", "k4") == [400]
