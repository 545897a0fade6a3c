"""The columnar produce entry (store.write.columns): Arrow tables to columns, queue routing,
and the choice between put_batch and put_messages."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from store import (
    MessageStore,
    ProduceColumns,
    StoreConfig,
    UnknownQueue,
    UnknownTopic,
    sharding_queue,
    sharding_queues,
)
from store.write.columns import columnar, resolve_queue_ids

MAP = pa.map_(pa.string(), pa.string())


def test_sharding_matches_rocketmq_select_by_hash() -> None:
    # Java: Math.abs("order-42".hashCode() % 8)
    keys = ["order-42", "", "é", "a" * 40]
    expected = [sharding_queue(k, 8) for k in keys]
    assert sharding_queues(keys, 8).tolist() == expected
    assert all(0 <= q < 8 for q in expected)
    assert sharding_queue("abc", 8) == abs(96354) % 8  # "abc".hashCode() == 96354


def test_from_arrow_reads_every_column() -> None:
    table = pa.table(
        {
            "body": pa.array([b"x", b"yy", b"z"]),
            "tags": pa.array(["a", None, None]),
            "keys": pa.array([["k1", "k2"], None, []], pa.list_(pa.string())),
            "properties": pa.array([[("p", "v")], None, [("q", "w"), ("p", "u")]], MAP),
            "queue_id": pa.array([None, 1, None], pa.int32()),
            "sharding_key": pa.array(["order-1", None, None]),
            "delay_level": pa.array([None, 3, None], pa.int32()),
            "deliver_at_ms": pa.array([None, None, 5], pa.int64()),
        }
    )
    cols = ProduceColumns.from_arrow(table)
    assert cols.bodies == [b"x", b"yy", b"z"]
    assert cols.tags == ["a", None, None]
    assert cols.keys == ["k1 k2", None, None]
    assert cols.properties == {
        "p": ["v", None, "u"],
        "q": [None, None, "w"],
        "TIMER_DELIVER_MS": [None, None, "5"],
    }
    assert cols.queue_ids is not None and cols.queue_ids.tolist() == [-1, 1, -1]
    assert cols.delay_levels is not None and cols.delay_levels.tolist() == [0, 3, 0]
    assert cols.scheduled().tolist() == [False, True, True]
    assert not columnar(cols)
    messages = cols.messages("t", np.array([2, 1, 0], np.int32))
    assert [m.queue_id for m in messages] == [2, 1, 0]
    assert messages[2].properties == {"q": "w", "p": "u", "TIMER_DELIVER_MS": "5"}
    assert messages[1].delay_level == 3


def test_from_arrow_keeps_string_keys_and_sliced_maps() -> None:
    table = pa.table(
        {
            "body": pa.array([b"a", b"b", b"c"]),
            "keys": pa.array(["one two", "", None]),
            "properties": pa.array([[("a", "1")], [("b", "2")], [("c", "3")]], MAP),
        }
    ).slice(1)
    cols = ProduceColumns.from_arrow(table)
    assert cols.keys is None
    assert cols.properties == {"b": ["2", None], "c": [None, "3"]}
    assert columnar(cols)


def test_from_arrow_refuses_a_missing_or_null_body() -> None:
    with pytest.raises(Exception, match="body"):
        ProduceColumns.from_arrow(pa.table({"tags": pa.array(["a"])}))
    with pytest.raises(Exception, match="body"):
        ProduceColumns.from_arrow(pa.table({"body": pa.array([b"a", None])}))


def test_many_property_names_go_message_by_message() -> None:
    many = pa.array([[(f"p{i}", "v") for i in range(100)]], MAP)
    cols = ProduceColumns.from_arrow(pa.table({"body": pa.array([b"x"]), "properties": many}))
    assert not columnar(cols)


def test_queue_resolution_explicit_then_sharding_then_round_robin() -> None:
    cols = ProduceColumns(
        bodies=[b"a", b"b", b"c", b"d"],
        queue_ids=np.array([3, -1, -1, -1], np.int32),
        sharding_keys=[None, "order-9", None, None],
    )
    ids = resolve_queue_ids("t", cols, 4, lambda k: np.arange(k, dtype=np.int32))
    assert ids is not None
    assert ids.tolist() == [3, sharding_queue("order-9", 4), 0, 1]
    plain = ProduceColumns(bodies=[b"a", b"b"])
    assert resolve_queue_ids("t", plain, 4, lambda k: np.zeros(k, np.int32)) is None
    bad = ProduceColumns(bodies=[b"a", b"b"], queue_ids=np.array([0, 4], np.int32))
    with pytest.raises(UnknownQueue, match="message 1"):
        resolve_queue_ids("t", bad, 4, lambda k: np.zeros(k, np.int32))


def test_put_columns_stores_plain_and_scheduled_rows(tmp_path: Path) -> None:
    config = StoreConfig(store_dir=tmp_path / "s", background_services=False)
    with MessageStore.open(config) as store:
        store.create_topic("t", 2)
        plain = store.put_columns(
            "t",
            ProduceColumns(bodies=[b"a", b"b"], keys=["k1", None], sharding_keys=["s", "s"]),
        )
        assert not isinstance(plain, list)
        assert set(plain.queue_ids.tolist()) == {sharding_queue("s", 2)}
        parked = store.put_columns("t", ProduceColumns(bodies=[b"c"], delay_levels=np.array([2], np.int32)))
        assert isinstance(parked, list) and parked[0].topic == "SCHEDULE_TOPIC_XXXX"
        assert [m.body for m in store.query_by_key("t", "k1")] == [b"a"]


def test_put_columns_auto_creates_or_refuses(tmp_path: Path) -> None:
    with MessageStore.open(StoreConfig(store_dir=tmp_path / "a", background_services=False)) as store:
        store.put_columns("new", ProduceColumns(bodies=[b"x"]))
        assert store.has_topic("new")
        assert store.ensure_topic("new") == store.queue_count("new")
    config = StoreConfig(store_dir=tmp_path / "b", background_services=False, auto_create_topics=False)
    with MessageStore.open(config) as store:
        with pytest.raises(UnknownTopic):
            store.put_columns("new", ProduceColumns(bodies=[b"x"]))
        with pytest.raises(UnknownTopic):
            store.ensure_topic("new")
