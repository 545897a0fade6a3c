"""Every reader of a store offers the one read signature, ``QueueReadApi``, and they agree."""

from __future__ import annotations

from pathlib import Path

from store import Boundary, MessageStore, QueueReadApi, StoreConfig, StoreReader


def check_reader(reader: object) -> None:
    """``reader`` reads topic ``t`` as written by :func:`write_sample`."""
    assert isinstance(reader, QueueReadApi)
    result = reader.read_batch("t", 0, 0, 10, "x")
    assert result.batch.column("body").to_pylist() == [b"a", b"c"]
    assert reader.read_batch("t", 0, 1, 1).batch.column("body").to_pylist() == [b"b"]
    assert reader.offset_for_timestamp("t", 0, 0, Boundary.LOWER) == 0


def write_sample(store: MessageStore) -> None:
    store.create_topic("t", 1)
    store.put_batch("t", [b"a", b"b", b"c"], tags=["x", "y", "x"])
    store.flush()


def test_the_facade_and_the_follower_are_queue_read_apis_and_agree(tmp_path: Path) -> None:
    config = StoreConfig(store_dir=tmp_path / "s", background_services=False)
    with MessageStore.open(config) as store:
        write_sample(store)
        check_reader(store)
        check_reader(StoreReader(config.store_dir))
