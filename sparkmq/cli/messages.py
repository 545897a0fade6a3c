"""``sparkmq produce``, ``msg get|find`` and ``offsets --at``: the kcat-like commands besides
``consume`` (:mod:`sparkmq.cli.consume`).

``produce`` sends through the route-aware client: each message goes straight to the broker
that owns its queue, a batch as one request per owning broker.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import pyarrow as pa
import typer

from sparkmq.cli.common import (
    DEFAULT_ENDPOINT,
    EndpointOption,
    Exit,
    Output,
    OutputOption,
    TokenOption,
    connect,
    emit,
    fail,
    parse_time_ms,
)
from sparkmq.cli.root import app, msg_app
from sparkmq.client.transport import segment


def _entry(body: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"body": body, **{k: v for k, v in options.items() if v not in (None, [], {})}}


def _properties(pairs: list[str] | None) -> dict[str, str]:
    found = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--property wants name=value, got {pair!r}", Exit.USAGE)
        found[name] = value
    return found


@app.command()
def produce(
    topic: str,
    *,
    body: Annotated[
        str | None, typer.Argument(help="Message body; one message per stdin line when absent.")
    ] = None,
    tags: Annotated[str | None, typer.Option(help="TAGS of every message.")] = None,
    key: Annotated[list[str] | None, typer.Option(help="A key (repeatable).")] = None,
    prop: Annotated[list[str] | None, typer.Option("--property", help="name=value (repeatable).")] = None,
    queue_id: Annotated[int | None, typer.Option("--queue", help="Explicit queue.")] = None,
    sharding_key: Annotated[str | None, typer.Option(help="Same key, same queue (ordered).")] = None,
    delay_level: Annotated[
        int | None, typer.Option(help="RocketMQ delay level (0 = none; above the table clamps).")
    ] = None,
    delay_ms: Annotated[int | None, typer.Option(help="Deliver after this many ms (timer message).")] = None,
    deliver_at: Annotated[
        str | None,
        typer.Option(
            help="Deliver at this time (timer message): epoch ms or ISO-8601, e.g. 2026-12-01T09:00Z."
        ),
    ] = None,
    ndjson: Annotated[bool, typer.Option(help="stdin is NDJSON, one produce entry per line.")] = False,
    arrow: Annotated[Path | None, typer.Option(help="Produce an Arrow IPC stream file as one batch.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Makes a retry return the first result.")
    ] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Produce one message, every stdin line (or NDJSON entry) as one batch, or an Arrow file;
    each message goes straight to the broker that owns its queue."""
    options = {
        "tags": tags, "keys": key or [], "properties": _properties(prop), "queue_id": queue_id,
        "sharding_key": sharding_key, "delay_level": delay_level, "delay_ms": delay_ms,
        "deliver_at_ms": None if deliver_at is None else parse_time_ms(deliver_at),
    }  # fmt: skip
    with connect(endpoint, token) as sparkmq:
        if body is not None:
            one = sparkmq.send(topic, _entry(body, options), idempotency_key=idempotency_key)
            emit(output, dict(one.raw), columns=("msg_id", "queue_id", "queue_offset", "uniq_key", "broker"))
            return
        if arrow is not None:
            results = sparkmq.send_arrow(topic, _arrow_table(arrow), idempotency_key=idempotency_key)
        else:
            entries = _ndjson_entries() if ndjson else _line_entries(options)
            if not entries:
                fail("nothing to produce on stdin", Exit.USAGE)
            results = sparkmq.send_batch(topic, entries, idempotency_key=idempotency_key)
    if output is Output.table:
        typer.echo(f"produced {len(results)} messages")
        return
    emit(output, {"results": [dict(r.raw) for r in results]})


def _line_entries(options: dict[str, Any]) -> list[dict[str, Any]]:
    return [_entry(line.rstrip("\n"), options) for line in sys.stdin if line.strip()]


def _ndjson_entries() -> list[dict[str, Any]]:
    entries = []
    for number, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(f"stdin line {number} is not JSON: {exc}", Exit.USAGE)
        if not isinstance(entry, dict):
            fail(f"stdin line {number} is not a JSON object", Exit.USAGE)
        entries.append(entry)
    return entries


def _arrow_table(path: Path) -> pa.Table:
    try:
        with pa.OSFile(str(path), "rb") as source:
            return pa.ipc.open_stream(source).read_all()
    except (OSError, pa.ArrowInvalid) as exc:
        fail(f"{path} is not a readable Arrow IPC stream: {exc}", Exit.USAGE)


MESSAGE_COLUMNS = ("topic", "queue_id", "queue_offset", "msg_id", "tags", "keys", "store_timestamp", "body")


@msg_app.command("get")
def msg_get(
    msg_id: Annotated[str | None, typer.Argument(help="offsetMsgId or UNIQ_KEY.")] = None,
    topic: Annotated[
        str | None, typer.Option(help="Topic (UNIQ_KEY lookups, or with --queue/--offset).")
    ] = None,
    queue_id: Annotated[int | None, typer.Option("--queue", help="Queue of a position lookup.")] = None,
    offset: Annotated[int | None, typer.Option(help="Offset of a position lookup.")] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """One message by offsetMsgId, by UNIQ_KEY, or by --topic/--queue/--offset (read at the
    queue's owner)."""
    with connect(endpoint, token) as sparkmq:
        if msg_id is not None:
            params = {"topic": topic} if topic else None
            found = sparkmq.request("GET", f"/messages/{segment(msg_id)}", params=params)
        elif topic is not None and queue_id is not None and offset is not None:
            pulled = sparkmq.pull(topic, queue_id, offset, max_messages=1)
            if not pulled.messages or pulled.messages[0].queue_offset != offset:
                fail(f"no message at {topic}/{queue_id}/{offset}", Exit.NOT_FOUND)
            found = dict(pulled.messages[0].raw)
        else:
            fail("give a msg id, or --topic, --queue and --offset", Exit.USAGE)
    emit(output, found, columns=MESSAGE_COLUMNS)


@msg_app.command("find")
def msg_find(
    topic: str,
    key: Annotated[str, typer.Option(help="A key given at produce time.")],
    since: Annotated[str | None, typer.Option(help="Stored at or after (ms, ISO 8601, -1h).")] = None,
    until: Annotated[str | None, typer.Option(help="Stored at or before.")] = None,
    max_results: Annotated[int, typer.Option("--max", help="Most results (newest first).")] = 64,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Messages of a topic with a key (the key index), newest first; exit 3 when none."""
    params: dict[str, Any] = {"key": key, "max": max_results}
    if since:
        params["begin_ms"] = parse_time_ms(since)
    if until:
        params["end_ms"] = parse_time_ms(until)
    with connect(endpoint, token) as sparkmq:
        found = sparkmq.request("GET", f"/topics/{segment(topic)}/messages", params=params)
    emit(output, found, rows=found["messages"], columns=MESSAGE_COLUMNS)
    if not found["messages"]:
        raise typer.Exit(int(Exit.NOT_FOUND))


@app.command()
def offsets(
    topic: str,
    at: Annotated[str, typer.Option(help="A time: ms, ISO 8601 (UTC), or -30m/-2h/-1d.")],
    queue_id: Annotated[int | None, typer.Option("--queue", help="One queue (default: every queue).")] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Per queue, the first offset stored at or after a time (kcat -Q, RocketMQ searchOffset),
    asked of each queue's owner."""
    when = parse_time_ms(at)
    with connect(endpoint, token) as sparkmq:
        count = sparkmq.route(topic).queue_count
        queues = [queue_id] if queue_id is not None else list(range(count))
        rows = [
            {"topic": topic, "queue_id": q, "timestamp_ms": when, "offset": sparkmq.offset_at(topic, q, when)}
            for q in queues
        ]
    emit(output, {"topic": topic, "timestamp_ms": when, "offsets": rows}, rows=rows,
         columns=("queue_id", "timestamp_ms", "offset"))  # fmt: skip
