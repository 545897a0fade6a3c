"""Decoding of messages:batch bodies (JSON, NDJSON, Arrow): pure, no store."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from broker.errors import BrokerError
from ingest_api.http import batches
from ingest_api.http.producing import check_arrow_queue_ids
from store import ProduceColumns, sharding_queue


def arrow_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def refused(call: object, *args: object) -> BrokerError:
    with pytest.raises(BrokerError) as info:
        call(*args)  # type: ignore[operator]
    return info.value


class TestJson:
    def test_valid_batch(self) -> None:
        raw = json.dumps({"messages": [{"body": "a"}, {"body_base64": "AAE=", "tags": "t", "keys": ["k"]}]})
        entries = batches.parse_json_batch(raw.encode(), 10)
        assert [e.to_message("t", None).body for e in entries] == [b"a", b"\x00\x01"]

    def test_bad_entry_names_its_index(self) -> None:
        raw = json.dumps({"messages": [{"body": "a"}, {"body": "b"}, {"tags": "no body"}]})
        err = refused(batches.parse_json_batch, raw.encode(), 10)
        assert (err.status, err.code, err.extra["index"]) == (422, "invalid_batch_entry", 2)

    @pytest.mark.parametrize(
        "entry",
        [
            {"body": "a", "body_base64": "YQ=="},
            {"body_base64": "not base64!"},
            {"body": "a", "queue_id": 1, "sharding_key": "k"},
            {"body": "a", "keys": ["has space"]},
            {"body": "a", "tags": "a||b"},
            {"body": "a", "properties": {"TAGS": "x"}},
            {"body": "a", "properties": {"p": "x\x01y"}},
            {"body": "a", "delay_level": "soon"},
            {"body": "a", "queue_id": -1},
            {"body": "a", "unknown": 1},
        ],
    )
    def test_invalid_fields(self, entry: dict[str, object]) -> None:
        raw = json.dumps({"messages": [{"body": "ok"}, entry]})
        err = refused(batches.parse_json_batch, raw.encode(), 10)
        assert err.extra["index"] == 1

    def test_limits(self) -> None:
        raw = json.dumps({"messages": [{"body": "a"}] * 3}).encode()
        assert refused(batches.parse_json_batch, raw, 2).status == 413
        assert refused(batches.parse_json_batch, b'{"messages": []}', 2).code == "empty_batch"
        assert refused(batches.parse_json_batch, b"{nope", 2).code == "invalid_json"


class TestNdjson:
    def test_lines_and_blank_lines(self) -> None:
        raw = b'{"body": "a"}\n\n{"body": "b", "tags": "t"}\n'
        assert [e.body for e in batches.parse_ndjson_batch(raw, 10)] == ["a", "b"]

    def test_bad_line_index(self) -> None:
        raw = b'{"body": "a"}\n{"body": 1}\n'
        err = refused(batches.parse_ndjson_batch, raw, 10)
        assert (err.code, err.extra["index"]) == ("invalid_batch_entry", 1)

    def test_limits(self) -> None:
        assert refused(batches.parse_ndjson_batch, b'{"body":"a"}\n' * 3, 2).status == 413
        assert refused(batches.parse_ndjson_batch, b"\n \n", 2).code == "empty_batch"


class TestArrow:
    def test_string_body_and_optional_columns(self) -> None:
        table = pa.table(
            {
                "body": pa.array(["x", "yy"]),
                "tags": pa.array(["a", None]),
                "keys": pa.array([["k1", "k2"], None], pa.list_(pa.string())),
                "properties": pa.array([[("p", "v")], None], pa.map_(pa.string(), pa.string())),
                "queue_id": pa.array([None, 1], pa.int64()),
                "sharding_key": pa.array(["order-1", None]),
            }
        )
        batch = batches.parse_arrow_batch(arrow_bytes(table), 10)
        assert batch.body.type == pa.binary()
        check_arrow_queue_ids("t", batch, 4)
        columns = ProduceColumns.from_arrow(
            pa.table({name: getattr(batch, name) for name in batches.ARROW_COLUMNS if getattr(batch, name)})
        )
        messages = columns.messages("t", None)
        assert messages[0].body == b"x"
        assert messages[0].keys == ("k1", "k2")
        assert messages[0].properties == {"p": "v"}
        assert messages[0].tags == "a"
        assert columns.sharding_keys == ["order-1", None]
        assert columns.queue_ids is not None
        assert columns.queue_ids.tolist() == [-1, 1]
        assert messages[1].tags is None
        assert sharding_queue("order-1", 4) in range(4)

    def test_unknown_queue_names_row(self) -> None:
        table = pa.table({"body": pa.array([b"a", b"b"]), "queue_id": pa.array([0, 9], pa.int32())})
        batch = batches.parse_arrow_batch(arrow_bytes(table), 10)
        err = refused(check_arrow_queue_ids, "t", batch, 4)
        assert (err.code, err.extra["index"]) == ("unknown_queue", 1)

    @pytest.mark.parametrize(
        ("columns", "index"),
        [
            ({"body": pa.array([b"a", None])}, 1),
            ({"body": pa.array([b"a", b"b"]), "tags": pa.array(["ok", "x||y"])}, 1),
            ({"body": pa.array([b"a", b"b"]), "keys": pa.array([["ok"], ["o", "bad key"]])}, 1),
            (
                {
                    "body": pa.array([b"a", b"b"]),
                    "properties": pa.array([[("KEYS", "v")], []], pa.map_(pa.string(), pa.string())),
                },
                0,
            ),
            ({"body": pa.array([b"a", b"b"]), "queue_id": pa.array([0, -1])}, 1),
            ({"body": pa.array([b"a", b"b"]), "delay_level": pa.array([1, -3])}, 1),
            (
                {
                    "body": pa.array([b"a", b"b"]),
                    "delay_level": pa.array([1, 2]),
                    "delay_ms": pa.array([None, 9]),
                },
                1,
            ),
            (
                {
                    "body": pa.array([b"a", b"b"]),
                    "queue_id": pa.array([None, 1]),
                    "sharding_key": pa.array([None, "k"]),
                },
                1,
            ),
        ],
    )
    def test_invalid_rows(self, columns: dict[str, pa.Array], index: int) -> None:
        err = refused(batches.parse_arrow_batch, arrow_bytes(pa.table(columns)), 10)
        assert err.extra["index"] == index, err.message

    def test_shape_errors(self) -> None:
        assert refused(batches.parse_arrow_batch, b"garbage", 10).code == "invalid_arrow_batch"
        no_body = arrow_bytes(pa.table({"tags": pa.array(["a"])}))
        assert refused(batches.parse_arrow_batch, no_body, 10).code == "invalid_arrow_batch"
        extra = arrow_bytes(pa.table({"body": pa.array([b"a"]), "color": pa.array([1])}))
        assert "color" in refused(batches.parse_arrow_batch, extra, 10).message
        wrong_type = arrow_bytes(pa.table({"body": pa.array([b"a"]), "queue_id": pa.array(["x"])}))
        assert refused(batches.parse_arrow_batch, wrong_type, 10).code == "invalid_arrow_batch"
        many = arrow_bytes(pa.table({"body": pa.array([b"a"] * 3)}))
        assert refused(batches.parse_arrow_batch, many, 2).status == 413
        empty = arrow_bytes(pa.table({"body": pa.array([], pa.binary())}))
        assert refused(batches.parse_arrow_batch, empty, 2).code == "empty_batch"


def test_body_size_check_names_row() -> None:
    err = refused(batches.check_body_sizes, pa.array([1, 5, 9]), 4)
    assert (err.status, err.extra["index"]) == (413, 1)


def test_produce_batch_json_matches_the_model() -> None:
    import json as json_module

    import numpy as np

    from ingest_api.http.render import produce_batch_json, produce_one_json, produce_results_stream
    from ingest_api.http.schemas import ProduceBatchOut, ProduceOut
    from store.format.ids import encode_msg_id
    from store.message_store import BatchPutResult
    from store.types import PutResult

    host = ("10.1.2.3", 10911)
    batch = BatchPutResult(
        topic='we"ird',
        queue_ids=np.array([0, 3], np.int32),
        queue_offsets=np.array([7, 8], np.int64),
        commitlog_offsets=np.array([0, 2**40 + 5], np.int64),
        sizes=np.array([100, 100], np.int32),
        uniq_keys=("AB" * 16, "CD" * 16),
        store_timestamp_ms=1_763_700_000_000,
        store_host=host,
    )
    expected = ProduceBatchOut(results=[ProduceOut.of(r) for r in batch.results()])
    assert produce_batch_json(batch) == expected.model_dump_json().encode()  # byte for byte
    odd = [PutResult("M" * 32, 'ü"\\\x01/', "t", 0, 1, 2, 3, 4)]  # escapes and non-ASCII
    assert produce_one_json(odd[0]) == ProduceOut.of(odd[0]).model_dump_json().encode()
    assert (
        produce_batch_json(odd)
        == ProduceBatchOut(results=[ProduceOut.of(r) for r in odd]).model_dump_json().encode()
    )
    assert json_module.loads(produce_batch_json(batch))["results"][1]["msg_id"] == encode_msg_id(
        host, 2**40 + 5
    )
    rows = [PutResult("M" * 32, "U" * 32, "SCHEDULE_TOPIC_XXXX", 2, 9, 10, 11, 12)]
    assert json_module.loads(produce_batch_json(rows)) == json_module.loads(
        ProduceBatchOut(results=[ProduceOut.of(r) for r in rows]).model_dump_json()
    )
    for outcome in (batch, rows):
        as_json = json_module.loads(produce_batch_json(outcome))["results"]
        assert pa.ipc.open_stream(produce_results_stream(outcome)).read_all().to_pylist() == as_json


def test_column_wise_msg_ids_and_uniq_keys_match_the_per_row_rendering() -> None:
    import json as json_module

    import numpy as np

    from ingest_api.http.render import produce_batch_json, produce_results_stream
    from store.format.ids import encode_msg_id
    from store.write.results import BatchPutResult

    rng = np.random.default_rng(7)
    offsets = np.concatenate([[0, 1, 15, 16, 2**62 - 1], rng.integers(0, 2**62, 500)]).astype(np.int64)
    n = len(offsets)
    host = ("192.168.255.1", 65535)
    for uniq_keys in (
        tuple(f"{i:032X}" for i in range(n)),
        tuple(["k\u00e9y", 'q"uote', "back\\slash", "ctl\x01"] + [f"{i:032X}" for i in range(n - 4)]),
    ):
        batch = BatchPutResult(
            topic="t",
            queue_ids=np.zeros(n, np.int32),
            queue_offsets=np.arange(n, dtype=np.int64),
            commitlog_offsets=offsets,
            sizes=np.full(n, 100, np.int32),
            uniq_keys=uniq_keys,
            store_timestamp_ms=1,
            store_host=host,
        )
        rows = json_module.loads(produce_batch_json(batch))["results"]
        assert [r["msg_id"] for r in rows] == [encode_msg_id(host, int(o)) for o in offsets]
        assert [r["uniq_key"] for r in rows] == list(uniq_keys)
        assert pa.ipc.open_stream(produce_results_stream(batch)).read_all().to_pylist() == rows


def test_column_entries_store_what_the_message_path_stores(tmp_path: Path) -> None:
    """put_entries' columnar path (no Message per entry) and entry_message + put_messages store
    the same messages; an oversized body is refused with its index by both."""
    from ingest_api.http import producing
    from ingest_api.http.schemas import ProduceIn
    from store.message_store import MessageStore
    from tests.support.stores import light_config

    entries = [
        ProduceIn(body="plain"),
        ProduceIn(body_base64="AAEC/w=="),
        ProduceIn(body="t", tags="TagA", keys=["k1", "k2"], properties={"a": "1", "b": "2"}),
        ProduceIn(body="\u00e9\U0001f600", properties={"b": "3"}),
        ProduceIn(body="", keys=["only"]),
    ]
    stored = []
    for name, put in (
        ("columns", lambda store: producing.put_entries(store, "t", entries)),
        (
            "rows",
            lambda store: store.put_messages(
                [
                    producing.entry_message("t", e, 4, 1024, i, 86_400_000, store.now_ms())
                    for i, e in enumerate(entries)
                ]
            ),
        ),
    ):
        with MessageStore.open(light_config(tmp_path / name)) as store:
            store.create_topic("t", 4)
            put(store)
            rows: list[dict[str, object]] = []
            for queue_id in range(4):
                batch = store.read_batch("t", queue_id, 0, max_messages=100).batch.to_pylist()
                for r in batch:
                    row = {k: v for k, v in r.items() if k not in _VOLATILE_COLUMNS}
                    row["properties"] = {k: v for k, v in r["properties"] or () if k != "UNIQ_KEY"}
                    rows.append(row)
            stored.append(sorted(rows, key=lambda r: (str(r["queue_id"]), str(r["queue_offset"]))))
        with MessageStore.open(light_config(tmp_path / f"{name}-small", max_message_size_bytes=4)) as store:
            with pytest.raises(BrokerError) as info:
                producing.put_entries(store, "t", entries)
            assert (info.value.status, info.value.extra) == (413, {"index": 0})
    assert stored[0] == stored[1]
    assert len(stored[0]) == len(entries)


_VOLATILE_COLUMNS = ("uniq_key", "born_timestamp", "store_timestamp", "msg_id")


def test_result_strings_column_matches_the_values() -> None:
    from ingest_api.http.render import _string_array

    for values in (["AB" * 16, "CD" * 16], ["a", "bcd", "ef"], ["ab", "é"], [], ["", ""]):
        assert _string_array(values).to_pylist() == values
