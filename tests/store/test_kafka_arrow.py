"""The Kafka mapping on Arrow columns equals the scalar rules row by row (both directions), and a
record written by the rules reads back exactly through a real store."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import (
    KAFKA_HEADERS_PROPERTY,
    KAFKA_KEY_PROPERTY,
    KAFKA_NULL_VALUE_PROPERTY,
    InvalidArgument,
    Message,
    MessageStore,
    StoreConfig,
    kafka_headers_to_properties,
    kafka_key_to_store,
    kafka_split_scheduling,
    kafka_to_message_columns,
    kafka_view,
    stored_kafka_headers,
    stored_kafka_key,
    stored_kafka_value,
)
from store.format.kafka_mapping import sharding_text

KEYS_TYPE = pa.list_(pa.field("element", pa.string()))
PROPS_TYPE = pa.map_(pa.string(), pa.string())
HEADERS_IN = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

token = st.text(alphabet="ab c\x01", min_size=1, max_size=4).filter(lambda t: " " not in t)
name = st.sampled_from(["color", "size", "TAGS", "DELAY", "UNIQ_KEY", "x-trace"])
prop_value = st.text(alphabet="xyz1 ", min_size=1, max_size=5)
mapping_property = st.one_of(
    st.tuples(
        st.just(KAFKA_KEY_PROPERTY),
        st.binary(max_size=6).map(lambda b: "b64:" + base64.b64encode(b).decode()),
    ),
    st.tuples(st.just(KAFKA_KEY_PROPERTY), st.just("not ours")),
    st.tuples(
        st.just(KAFKA_HEADERS_PROPERTY),
        st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))), max_size=3).map(
            lambda hs: json.dumps([[k, None if v is None else base64.b64encode(v).decode()] for k, v in hs])
        ),
    ),
    st.tuples(st.just(KAFKA_HEADERS_PROPERTY), st.just("{broken")),
    st.tuples(st.just(KAFKA_NULL_VALUE_PROPERTY), st.just("1")),
)
stored_row = st.tuples(
    st.one_of(st.none(), st.lists(token, max_size=3)),
    st.binary(max_size=8),
    st.one_of(
        st.none(),
        st.lists(st.one_of(st.tuples(name, prop_value), mapping_property), max_size=4).map(
            lambda ps: list(dict(ps).items())
        ),
    ),
)


def _view_rows(rows: list[tuple[Any, bytes, Any]], with_headers: bool, offset: int = 0) -> Any:
    keys = pa.array([None] * offset + [r[0] for r in rows], KEYS_TYPE).slice(offset)
    body = pa.array([b""] * offset + [r[1] for r in rows], pa.binary()).slice(offset)
    props = pa.array([[("p", "q")]] * offset + [r[2] for r in rows], PROPS_TYPE).slice(offset)
    return kafka_view(keys, body, props, with_headers=with_headers)


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(stored_row, max_size=8), offset=st.integers(0, 2))
def test_view_equals_the_scalar_rules(rows: list[tuple[Any, bytes, Any]], offset: int) -> None:
    view = _view_rows(rows, with_headers=True, offset=offset)
    assert view.headers is not None
    for i, (tokens, body, props) in enumerate(rows):
        properties = dict(props or ())
        assert view.key[i].as_py() == stored_kafka_key(" ".join(tokens) if tokens else None, properties)
        assert view.value[i].as_py() == stored_kafka_value(body, properties)
        headers = [(h["key"], h["value"]) for h in view.headers[i].as_py() or ()]
        assert headers == list(stored_kafka_headers(properties))
        assert view.headers[i].as_py() is None or headers  # no headers -> null, as Spark's Kafka source


def test_view_without_headers_and_types() -> None:
    view = _view_rows([(["a", "b"], b"v", [("color", "red")]), ([], b"", None)], with_headers=False)
    assert view.headers is None
    assert view.key.type == pa.binary()
    assert view.key.to_pylist() == [b"a b", None]
    assert view.value.to_pylist() == [b"v", b""]


header_value = st.one_of(st.none(), st.binary(max_size=6), st.sampled_from([b"3", b"+2", b"x"]))
kafka_row = st.tuples(
    st.one_of(st.none(), st.binary(max_size=6), st.text(alphabet="ab \x01", max_size=5).map(str.encode)),
    st.one_of(st.none(), st.binary(max_size=6)),
    st.one_of(
        st.none(),
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "", "TAGS", "DELAY", "TIMER_DELAY_MS", "h\x01"]), header_value
            ),
            max_size=4,
        ),
    ),
)


def _scalar(key: bytes | None, value: bytes | None, headers: list[Any] | None) -> tuple[Any, ...]:
    """What the gateway's record_to_message stores for one record (the scalar rules)."""
    tokens, props = kafka_key_to_store(key)
    rest, level, timer = kafka_split_scheduling(headers or ())
    props.update(kafka_headers_to_properties(rest))
    if value is None:
        props[KAFKA_NULL_VALUE_PROPERTY] = "1"
    props.update(timer)
    return value or b"", " ".join(tokens) or None, list(props.items()) or None, level


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(kafka_row, max_size=8), key_as_text=st.booleans())
def test_rows_in_equal_the_scalar_rules(rows: list[tuple[Any, Any, Any]], key_as_text: bool) -> None:
    keys = [r[0] for r in rows]
    if key_as_text:
        keys = [None if k is None else k.decode("utf-8", "replace").encode() for k in keys]
    key_column = (
        pa.array([None if k is None else k.decode() for k in keys], pa.string())
        if key_as_text
        else pa.array(keys, pa.binary())
    )
    headers = pa.array(
        [None if h is None else [{"key": k, "value": v} for k, v in h] for _, _, h in rows], HEADERS_IN
    )
    try:
        expected = [_scalar(k, v, h) for k, (_, v, h) in zip(keys, rows, strict=True)]
    except InvalidArgument:
        with pytest.raises(InvalidArgument):
            kafka_to_message_columns(key_column, pa.array([r[1] for r in rows], pa.binary()), headers)
        return
    out = kafka_to_message_columns(key_column, pa.array([r[1] for r in rows], pa.binary()), headers)
    for i, (body, keys_text, props, level) in enumerate(expected):
        assert out.body[i].as_py() == body
        assert out.keys[i].as_py() == keys_text
        assert out.properties[i].as_py() == props
        assert out.delay_level[i].as_py() == level
        assert out.sharding_key[i].as_py() == (None if keys[i] is None else sharding_text(keys[i]))


def test_plain_rows_take_no_properties() -> None:
    out = kafka_to_message_columns(pa.array(["k1", None]), pa.array(["v1", "v2"]), None)
    assert out.body.to_pylist() == [b"v1", b"v2"]
    assert out.keys.to_pylist() == ["k1", None]
    assert out.properties.null_count == 2
    assert out.sharding_key.to_pylist() == ["k1", None]


def test_a_record_written_by_the_rules_reads_back_exactly(tmp_path: Path) -> None:
    rows = [
        (b"order-1", b"v1", [("a", b"1")]),
        (b"\xff\x00", None, [("dup", b"1"), ("dup", b"2"), ("bin", b"\xfe")]),
        (None, b"", []),
        (b"a b", b"x", [("DELAY", b"0"), ("c", None)]),
    ]
    out = kafka_to_message_columns(
        pa.array([r[0] for r in rows], pa.binary()),
        pa.array([r[1] for r in rows], pa.binary()),
        pa.array([[{"key": k, "value": v} for k, v in r[2]] for r in rows], HEADERS_IN),
    )
    with MessageStore.open(StoreConfig(store_dir=tmp_path / "s", background_services=False)) as store:
        store.create_topic("t", 1)
        for i in range(len(rows)):
            keys_text = out.keys[i].as_py()
            store.put_message(
                Message(
                    topic="t",
                    body=out.body[i].as_py(),
                    keys=tuple(keys_text.split(" ")) if keys_text else (),
                    properties=dict(out.properties[i].as_py() or ()),
                    queue_id=0,
                )
            )
        batch = store.read_batch("t", 0, 0, 10).batch
    view = kafka_view(
        batch.column("keys"), batch.column("body"), batch.column("properties"), with_headers=True
    )
    assert view.key.to_pylist() == [r[0] for r in rows]
    assert view.value.to_pylist() == [r[1] for r in rows]
    assert view.headers is not None
    expected_headers = [[h for h in r[2] if h[0] != "DELAY"] or None for r in rows]
    assert [None if h is None else [(x["key"], x["value"]) for x in h] for h in view.headers.to_pylist()] == (
        expected_headers
    )


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.one_of(st.none(), st.lists(token, max_size=1)), max_size=10),
    offset=st.integers(0, 3),
)
def test_one_key_per_message_takes_the_tokens_as_they_are(keys: list[Any], offset: int) -> None:
    column = pa.array([["pad"]] * offset + keys, KEYS_TYPE).slice(offset)
    no_props = pa.nulls(len(keys), PROPS_TYPE)
    view = kafka_view(column, pa.array([b""] * len(keys)), no_props, with_headers=False)
    view.key.validate(full=True)
    assert view.key.to_pylist() == [k[0].encode() if k else None for k in keys]
