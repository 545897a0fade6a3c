"""schemathesis hooks for the contract test (``SCHEMATHESIS_HOOKS=tests.ingest.schemathesis_hooks``).

They teach schemathesis the two body formats JSON Schema does not describe, and they draw
*valid* requests for the two rules of the contract that JSON Schema cannot state (both are
written in the document's descriptions). Nothing here turns a refusal into an acceptance:
a case the hooks touch stays as valid (or invalid) as it was.

* ``application/x-ndjson``: the document gives the lines as an array of ``ProduceEntryIn``;
  sent one JSON object per line.
* ``application/vnd.apache.arrow.stream``: real Arrow IPC streams of produce columns.
* ``deliver_at_ms`` is at most ``--timer-max-delay`` ahead of the broker's clock at the time
  of the request: a valid case gets a time within that window.
* A batch is one transaction: entries that name one name the same. A valid batch whose
  entries name several gets the first one's on all of them.
* ``%`` followed by two hex digits in a name (topic and group names may hold ``%``):
  schemathesis cannot put such a name into a path as it is. It decodes a path value before it
  encodes it (and hands some values over already encoded), so ``%RETRY%00`` would travel as
  ``%RETRY`` + NUL + ``0``; and a stateful step puts a name it read from a listing into a path
  the same way. So valid cases never use or create such a name: a valid case whose path
  values, decoded as the broker reads them, do not fit their patterns or hold such a sequence
  is left out; in the names of bodies (topics, producer groups) the sequence becomes ``%g0``
  (still valid, same length); and a group name does not start with two hex digits (its retry
  topic ``%RETRY%<group>`` would hold one).
* ``wait_ms`` (long-poll, a query parameter or a POP receive's body field) above
  :data:`MAX_WAIT_MS` is cut, so the run does not spend minutes waiting on empty queues (a
  value that was valid stays valid).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import schemathesis
from hypothesis import strategies as st

from broker.config import ServerConfig
from tests.support.stores import light_config

#: Long-polls of the run wait at most this long (ms).
MAX_WAIT_MS = 50
NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: The broker's --timer-max-delay (the test runs it with the default).
TIMER_MAX_DELAY_MS = ServerConfig(store=light_config("unused")).store.timer_max_delay_ms


@schemathesis.serializer(NDJSON)
def _ndjson(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    lines = value if isinstance(value, list) else [value]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@st.composite
def _arrow_batches(draw: st.DrawFn) -> bytes:
    rows = draw(st.integers(min_value=1, max_value=5))
    bodies = draw(st.lists(st.binary(max_size=64), min_size=rows, max_size=rows))
    columns: dict[str, pa.Array] = {"body": pa.array(bodies, pa.binary())}
    if draw(st.booleans()):
        tag = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
        columns["tags"] = pa.array(draw(st.lists(st.none() | tag, min_size=rows, max_size=rows)), pa.string())
    if draw(st.booleans()):
        key = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=8)
        columns["sharding_key"] = pa.array(draw(st.lists(key, min_size=rows, max_size=rows)), pa.string())
    table = pa.table(columns)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


schemathesis.openapi.media_type(ARROW_STREAM, _arrow_batches())


def _is_valid(case: schemathesis.Case) -> bool:
    meta = case.meta
    return meta is not None and meta.generation.mode.is_positive


def _cut_wait(case: schemathesis.Case) -> None:
    body = case.body
    if isinstance(body, dict):  # a POP receive's long poll is in its JSON body
        waited = body.get("wait_ms")
        # 29999.0 is an integer in JSON too
        if isinstance(waited, int | float) and not isinstance(waited, bool) and MAX_WAIT_MS < waited <= 60e3:
            body["wait_ms"] = MAX_WAIT_MS
    query = case.query
    if not isinstance(query, dict):
        return
    wait = query.get("wait_ms")
    if isinstance(wait, str) and wait.isascii() and wait.isdigit():  # the coverage phase's spelling
        if MAX_WAIT_MS < int(wait) <= 60_000:
            query["wait_ms"] = str(MAX_WAIT_MS)
    elif isinstance(wait, int) and not isinstance(wait, bool) and MAX_WAIT_MS < wait <= 60_000:
        query["wait_ms"] = MAX_WAIT_MS


def _entries(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        return [e for e in body["messages"] if isinstance(e, dict)]
    if isinstance(body, list):
        return [e for e in body if isinstance(e, dict)]
    return [body] if isinstance(body, dict) else []


def _valid_requests_only(case: schemathesis.Case) -> None:
    entries = _entries(case.body)
    now_ms = int(time.time() * 1000)
    for entry in entries:
        due = entry.get("deliver_at_ms")
        if isinstance(due, float) and due.is_integer():  # JSON Schema's integer includes 1.0
            due = int(due)
        if isinstance(due, int) and not isinstance(due, bool) and due > now_ms + TIMER_MAX_DELAY_MS // 2:
            entry["deliver_at_ms"] = now_ms + due % (TIMER_MAX_DELAY_MS // 2)
    batch = case.body.get("transaction") if isinstance(case.body, dict) and "messages" in case.body else None
    named = [t for t in [batch, *(e.get("transaction") for e in entries)] if isinstance(t, dict)]
    if not named:
        return
    scheduled = any(
        e.get(f) is not None for e in entries for f in ("delay_level", "deliver_at_ms", "delay_ms")
    )
    for entry in entries:  # one transaction for all, or (scheduled entries) none
        if scheduled:
            entry.pop("transaction", None)
        else:
            entry["transaction"] = dict(named[0])


_ESCAPE_LIKE = re.compile("%[0-9A-Fa-f]([0-9A-Fa-f])")
_HEX_PAIR = re.compile("[0-9A-Fa-f]{2}")
#: Body fields that name a topic or a producer group.
_NAME_FIELDS = ("topic", "producer_group")


def _plain_names(case: schemathesis.Case) -> None:
    parameters = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    group = parameters.get("group")
    if isinstance(group, str) and _HEX_PAIR.match(group):  # no '%' involved: encoded or not alike
        parameters["group"] = "g" + group[1:]
    pending = [case.body]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for field in _NAME_FIELDS:
                if isinstance(node.get(field), str):
                    node[field] = _ESCAPE_LIKE.sub(r"%g\1", node[field])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _sent_as_drawn(case: schemathesis.Case) -> bool:
    """Whether every path value, decoded as the broker reads it, fits its pattern (and a name
    holds no ``%`` + two hex digits)."""
    values = case.path_parameters if isinstance(case.path_parameters, dict) else {}
    for parameter in case.operation.path_parameters:
        pattern = parameter.definition.get("schema", {}).get("pattern")
        value = values.get(parameter.name)
        if not pattern or not isinstance(value, str):
            continue
        decoded = unquote(value)
        if re.search(pattern, decoded) is None or _ESCAPE_LIKE.search(decoded):
            return False
    return True


@schemathesis.hook
def filter_case(context: schemathesis.HookContext, case: schemathesis.Case) -> bool:
    return not _is_valid(case) or _sent_as_drawn(case)


@schemathesis.hook
def map_case(context: schemathesis.HookContext, case: schemathesis.Case) -> schemathesis.Case:
    _cut_wait(case)
    if _is_valid(case):
        _plain_names(case)
        _valid_requests_only(case)
    return case
