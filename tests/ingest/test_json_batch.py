"""The msgspec decoder of JSON / NDJSON batches against the pydantic models it stands in for.

The decoder may only accept what the models accept, with the same values; everything else
goes to the models (whose refusals are the contract), so it is checked differentially on
generated batches full of near-misses.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.errors import BrokerError
from ingest_api.http import batches, json_batch
from ingest_api.http.producing import entry_columns
from store import ProduceColumns

QUEUES, MAX_BODY, MAX_DELAY = 4, 64, 2**40
NOW_MS = 1_764_000_000_000  # both sides judge schedules against the same clock reading

TEXTS = ["", "a", "a b", "x\x01", "y\x02", "é", "\u3000", "a||b", "|", "k\tv", "🙂", "t" * 1025]
#: For every field, values the models accept and near-misses they refuse.
VALUES: dict[str, list[Any]] = {
    "body": [None, *TEXTS, "z" * 70, 5],
    "body_base64": [None, "", "YQ==", "AAE=", "not base64!", "YQ", "YW Jj", 5],
    "tags": [None, *TEXTS, 5],
    "keys": [None, [], ["k"], ["k", "l"], *([text] for text in TEXTS), ["k"] * 64, ["k"] * 65, "k"],
    "properties": [
        None,
        {},
        {"p": "v"},
        {"p": None},
        {"": "v"},
        {"TAGS": "x"},
        {"UNIQ_KEY": "x"},
        {"DELAY": "1"},
        {"a\x02": "v"},
        {"p": "v\x01"},
        {"p": "é", "q": ""},
        {"p": 1},
        [],
    ],
    "queue_id": [None, -1, 0, 3, 4, 65535, 65536, 1.0, True, "1"],
    "sharding_key": [None, *TEXTS],
    "delay_level": [None, 0, 3, -1, 2**31 - 1, 2**31, "soon", 2.0],
    "deliver_at_ms": [None, 0, 10, -5, 2**63, 2**63 - 1, -(2**63) - 1],
    "delay_ms": [None, 0, 1000, -5, 2**62],
    "transaction": [None, {"producer_group": "g"}, {}],
    "topic": [None, "t", "other", ""],
    "bogus": [1, None],
}
CASES = [(name, value) for name, values in VALUES.items() for value in values]
fields = {name: st.sampled_from(values) for name, values in VALUES.items()}
#: Entries that are mostly valid, with a field or two drawn from the near-misses.
bodies = st.fixed_dictionaries({"body": st.sampled_from(["a", "hello", "🙂"])})
#: Valid entries with at most one field drawn from the near-misses (so whole batches often
#: pass msgspec and the rules after it are exercised), or with any fields at all.
entries = st.builds(
    lambda body, other: {**body, **other},
    bodies | st.just({}),
    st.one_of(st.just({}), *(st.fixed_dictionaries({name: value}) for name, value in fields.items())),
) | st.builds(lambda body, others: {**body, **others}, bodies, st.fixed_dictionaries({}, optional=fields))


def columns_equal(left: ProduceColumns, right: ProduceColumns) -> None:
    for name in ProduceColumns.__slots__:
        a, b = getattr(left, name), getattr(right, name)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            assert a is not None and b is not None and np.array_equal(a, b), name
        else:
            assert (list(a) if isinstance(a, list | tuple) else a) == (
                list(b) if isinstance(b, list | tuple) else b
            ), name


def outcome(call: Any) -> ProduceColumns | tuple[int, str, str]:
    try:
        return call()  # type: ignore[no-any-return]
    except BrokerError as exc:
        return (exc.status, exc.code, exc.message)


def check_agrees(raw: bytes, ndjson: bool, limit: int = 5) -> bool:
    """Asserts the fast decoder's acceptance implies the models' with the same columns."""
    fast = (json_batch.decode_ndjson_batch if ndjson else json_batch.decode_json_batch)(raw, limit)
    if fast is None:
        return False
    models = (batches.parse_ndjson_batch if ndjson else batches.parse_json_batch)(raw, limit)
    assert all(e.transaction is None and e.topic is None for e in models)
    ours = outcome(lambda: entry_columns(fast[0], QUEUES, MAX_BODY, MAX_DELAY, "t", NOW_MS, fast[1]))
    theirs = outcome(lambda: entry_columns(models, QUEUES, MAX_BODY, MAX_DELAY, "t", NOW_MS))
    if isinstance(ours, ProduceColumns) and isinstance(theirs, ProduceColumns):
        columns_equal(ours, theirs)
    else:
        assert ours == theirs
    return True


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(entries, max_size=4), st.booleans())
def test_accepts_only_what_the_models_accept_with_the_same_columns(
    batch: list[dict[str, Any]], transaction: bool
) -> None:
    document: dict[str, Any] = {"messages": batch}
    if transaction:
        document["transaction"] = {"producer_group": "g"}
    check_agrees(json.dumps(document).encode(), ndjson=False)
    lines = [json.dumps(entry).encode() for entry in batch]
    check_agrees(b"\n".join(lines), ndjson=True)
    check_agrees(b"\n \n".join(lines) + b"\n", ndjson=True)


@pytest.mark.parametrize(("name", "value"), CASES)
def test_each_field_value_agrees(name: str, value: Any) -> None:
    for body in ({"body": "a"}, {"body_base64": "YQ=="}, {}):
        entry = {**body, name: value}
        check_agrees(json.dumps({"messages": [{"body": "ok"}, entry]}).encode(), ndjson=False)
        check_agrees(json.dumps({"body": "ok"}).encode() + b"\n" + json.dumps(entry).encode(), ndjson=True)
    check_agrees(json.dumps({"messages": [{"body": "a", "sharding_key": "s", name: value}]}).encode(), False)
    check_agrees(json.dumps({"messages": [{"body": "a", "queue_id": 1, name: value}]}).encode(), False)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"body": "a", "body": "b"}]}',  # duplicate keys: the last wins in both
        b'{"messages": [{"body": "a"}], "messages": [{"body": "b"}, {"body": "c"}]}',
        b'{"messages": [{"body": "\\ud800"}]}',  # a lone surrogate
        b'{"messages": [{"body": "\\ud83d\\ude42", "tags": "\\u00e9"}]}',
        b'{"messages": [{"body": "a", "transaction": null, "topic": null}], "transaction": null}',
        b'{"messages": [{"body": "a"}]} ',
        b'{"messages": [{"body": "a"}]}{"messages": []}',
        b'{"messages": [{"body": "a", "queue_id": 3.0}]}',
        b'{"messages": [{"body": "a", "keys": ["\\u2028"]}]}',
        b'{"messages": [{"body": "a", "properties": {"p": "v"}, "delay_ms": 5}]}',
    ],
)
def test_edge_cases_agree(raw: bytes) -> None:
    check_agrees(raw, ndjson=False)


def test_ndjson_takes_one_object_per_line() -> None:
    # msgspec's decode_lines would take both objects of the first line; the models refuse it
    assert json_batch.decode_ndjson_batch(b'{"body": "a"} {"body": "b"}\n', 5) is None
    assert check_agrees(b'{"body": "a"}\r\n\n{"body": "b"}', ndjson=True)


def test_takes_the_common_batches() -> None:
    """The fast path is really taken for ordinary batches (every optional field included)."""
    batch = [
        {"body": "a"},
        {"body_base64": "AAE=", "tags": "t", "keys": ["k1", "k2"], "properties": {"p": "v"}},
        {"body": "b", "queue_id": 1},
        {"body": "c", "sharding_key": "s"},
        {"body": "d", "delay_level": 2},
        {"body": "e", "delay_ms": 1000},
    ]
    assert check_agrees(json.dumps({"messages": batch}).encode(), ndjson=False, limit=10)
    assert check_agrees(b"\n".join(json.dumps(e).encode() for e in batch), ndjson=True, limit=10)


@pytest.mark.parametrize(
    "document",
    [
        {"messages": []},
        {"messages": [{"body": "a"}] * 3},  # over the limit of 2
        {"messages": [{"body": "a", "topic": "t"}]},
        {"messages": [{"body": "a"}], "transaction": {"producer_group": "g"}},
        {"messages": [{"body": "a", "body_base64": "YQ=="}]},
    ],
)
def test_leaves_refusals_transactions_and_topics_to_the_models(document: dict[str, Any]) -> None:
    assert json_batch.decode_json_batch(json.dumps(document).encode(), 2) is None


def test_fields_match_the_model() -> None:
    from ingest_api.http.schemas import ProduceEntryIn

    assert set(json_batch.FastEntry.__struct_fields__) == set(ProduceEntryIn.model_fields)
