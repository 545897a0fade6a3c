"""``sparkmq produce``, ``consume``, ``msg get|find`` and ``offsets --at``: the kcat-like commands.

``consume`` reads every queue of a topic (or one ``--queue``) from ``--from`` (earliest,
latest, ``-N`` for the last N per queue, a time, or the ``--group``'s committed offsets), stops
at the end unless ``--follow``, and with ``--group G --commit`` commits what it printed.
``--format`` takes kcat-like tokens: ``%t`` topic, ``%q`` queue, ``%o`` offset, ``%k`` keys,
``%s`` body (base64 when not UTF-8), ``%T`` store time (ms), ``%B`` born time (ms), ``%g`` tags,
``%i`` msg id, ``%u`` UNIQ_KEY, ``%h`` properties (JSON), ``%%``, ``\\n`` and ``\\t``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from sparkmq.cli.common import (
    DEFAULT_URL,
    Exit,
    Output,
    OutputOption,
    TokenOption,
    UrlOption,
    call,
    client,
    emit,
    fail,
    parse_time_ms,
)
from sparkmq.cli.root import app, msg_app

NDJSON = "application/x-ndjson"
ARROW_STREAM = "application/vnd.apache.arrow.stream"
#: Most messages one pull asks for.
PULL_CHUNK = 1000
_TOKEN = re.compile(r"%[tqokTBsgiuh%]|\\[nt]")


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
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Produce one message, every stdin line (or NDJSON entry) as one batch, or an Arrow file."""
    options = {
        "tags": tags, "keys": key or [], "properties": _properties(prop), "queue_id": queue_id,
        "sharding_key": sharding_key, "delay_level": delay_level, "delay_ms": delay_ms,
        "deliver_at_ms": None if deliver_at is None else parse_time_ms(deliver_at),
    }  # fmt: skip
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    with client(url, token) as http:
        if body is not None:
            result = call(
                http, "POST", f"/topics/{topic}/messages", json=_entry(body, options), headers=headers
            )
            emit(output, result, columns=("msg_id", "queue_id", "queue_offset", "uniq_key"))
            return
        if arrow is not None:
            content, media = arrow.read_bytes(), ARROW_STREAM
        elif ndjson:
            content, media = sys.stdin.read().encode("utf-8"), NDJSON
        else:
            lines = [line.rstrip("\n") for line in sys.stdin if line.strip()]
            content = json.dumps({"messages": [_entry(line, options) for line in lines]}).encode("utf-8")
            media = "application/json"
        if not content.strip():
            fail("nothing to produce on stdin", Exit.USAGE)
        headers["content-type"] = media
        results = call(http, "POST", f"/topics/{topic}/messages:batch", content=content, headers=headers)
    if output is Output.table:
        typer.echo(f"produced {len(results['results'])} messages")
        return
    emit(output, results)


def render(message: dict[str, Any], topic: str, fmt: str) -> str:
    """One message through a kcat-like ``--format``."""
    body = message["body"] if message.get("body") is not None else message.get("body_base64", "")

    def token(match: re.Match[str]) -> str:
        value = {
            "%t": topic, "%q": message["queue_id"], "%o": message["queue_offset"],
            "%k": " ".join(message.get("keys") or []), "%T": message["store_timestamp"],
            "%B": message["born_timestamp"], "%s": body, "%g": message.get("tags") or "",
            "%i": message["msg_id"], "%u": message.get("uniq_key") or "", "%%": "%",
            "%h": json.dumps(message.get("properties") or {}, ensure_ascii=False), "\\n": "\n", "\\t": "\t",
        }[match.group(0)]  # fmt: skip
        return str(value)

    return _TOKEN.sub(token, fmt)


def _start_offsets(
    http: httpx.Client, topic: str, queues: list[int], start: str, group: str | None
) -> dict[int, int]:
    described = call(http, "GET", f"/topics/{topic}")
    bounds = {q["queue_id"]: (q["min_offset"], q["max_offset"]) for q in described["queue_offsets"]}
    if start == "committed":
        if group is None:
            fail("--from committed needs --group", Exit.USAGE)
        committed = call(http, "GET", f"/groups/{group}/offsets", params={"topic": topic})["offsets"]
        return {q: max(int(committed.get(str(q), -1)), bounds[q][0]) for q in queues}
    if start == "earliest":
        return {q: bounds[q][0] for q in queues}
    if start == "latest":
        return {q: bounds[q][1] for q in queues}
    if re.fullmatch(r"-\d+", start):
        return {q: max(bounds[q][0], bounds[q][1] - int(start[1:])) for q in queues}
    at = parse_time_ms(start)
    return {
        q: call(http, "GET", f"/topics/{topic}/queues/{q}/offset", params={"timestamp_ms": at})["offset"]
        for q in queues
    }


@app.command()
def consume(
    topic: str,
    *,
    queue_id: Annotated[int | None, typer.Option("--queue", help="One queue (default: every queue).")] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="earliest | latest | -N | committed | a time (ms, ISO 8601, -30m)."),
    ] = None,
    offset: Annotated[int | None, typer.Option(help="Start offset (with --queue).")] = None,
    until: Annotated[str | None, typer.Option(help="Stop at messages stored after this time.")] = None,
    max_messages: Annotated[int | None, typer.Option(help="Stop after this many messages.")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep waiting for new messages.")] = False,
    group: Annotated[str | None, typer.Option(help="Consumer group (start from its offsets).")] = None,
    commit: Annotated[bool, typer.Option(help="Commit the group's offsets as messages print.")] = False,
    tags: Annotated[str | None, typer.Option(help="Tag expression, e.g. 'A || B'.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="kcat-like format, e.g. '%q %o %s\\n'.")] = None,
    wait_ms: Annotated[int, typer.Option(help="Long-poll per queue while following.")] = 500,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Print messages of every queue (JSON lines, a table, or ``--format``); the next offset per
    queue goes to stderr at the end."""
    if commit and group is None:
        fail("--commit needs --group", Exit.USAGE)
    end_ms = parse_time_ms(until) if until else None
    with client(url, token) as http:
        count = call(http, "GET", f"/topics/{topic}")["queues"]
        queues = [queue_id] if queue_id is not None else list(range(count))
        if offset is not None:
            positions = dict.fromkeys(queues, offset)
        else:
            positions = _start_offsets(
                http, topic, queues, start or ("committed" if group else "earliest"), group
            )
        printed = 0
        done: set[int] = set()
        while max_messages is None or printed < max_messages:
            idle = True
            for q in [q for q in queues if q not in done]:
                limit = PULL_CHUNK if max_messages is None else min(PULL_CHUNK, max_messages - printed)
                if limit <= 0:
                    break
                params: dict[str, int | str] = {"offset": positions[q], "max_messages": limit, "wait_ms": 0}
                if follow and idle and q == queues[-1]:
                    params["wait_ms"] = wait_ms
                if tags:
                    params["tags"] = tags
                pulled = call(http, "GET", f"/topics/{topic}/queues/{q}/messages", params=params)
                for message in pulled["messages"]:
                    if end_ms is not None and message["store_timestamp"] > end_ms:
                        done.add(q)
                        break
                    _print(message, topic, fmt, output)
                    printed += 1
                    positions[q] = message["queue_offset"] + 1
                if q not in done:
                    positions[q] = max(positions[q], pulled["next_offset"])
                idle = idle and not pulled["messages"]
                if commit and group is not None:
                    call(
                        http,
                        "PUT",
                        f"/groups/{group}/offsets",
                        json={"topic": topic, "offsets": {str(q): positions[q]}},
                    )
            if len(done) == len(queues) or (idle and not follow):
                break
    typer.echo("next_offsets=" + json.dumps({str(q): o for q, o in positions.items()}), err=True)


def _print(message: dict[str, Any], topic: str, fmt: str | None, output: Output) -> None:
    if fmt is not None:
        typer.echo(render(message, topic, fmt), nl=False)
    elif output is Output.table:
        typer.echo(render(message, topic, "%q\t%o\t%g\t%k\t%s"))
    else:
        typer.echo(json.dumps(message, ensure_ascii=False))


MESSAGE_COLUMNS = ("topic", "queue_id", "queue_offset", "msg_id", "tags", "keys", "store_timestamp", "body")


@msg_app.command("get")
def msg_get(
    msg_id: Annotated[str | None, typer.Argument(help="offsetMsgId or UNIQ_KEY.")] = None,
    topic: Annotated[
        str | None, typer.Option(help="Topic (UNIQ_KEY lookups, or with --queue/--offset).")
    ] = None,
    queue_id: Annotated[int | None, typer.Option("--queue", help="Queue of a position lookup.")] = None,
    offset: Annotated[int | None, typer.Option(help="Offset of a position lookup.")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """One message by offsetMsgId, by UNIQ_KEY, or by --topic/--queue/--offset."""
    with client(url, token) as http:
        if msg_id is not None:
            found = call(http, "GET", f"/messages/{msg_id}", params={"topic": topic} if topic else None)
        elif topic is not None and queue_id is not None and offset is not None:
            params = {"offset": offset, "max_messages": 1}
            pulled = call(http, "GET", f"/topics/{topic}/queues/{queue_id}/messages", params=params)
            if not pulled["messages"] or pulled["messages"][0]["queue_offset"] != offset:
                fail(f"no message at {topic}/{queue_id}/{offset}", Exit.NOT_FOUND)
            found = pulled["messages"][0]
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
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Messages of a topic with a key (the key index), newest first; exit 3 when none."""
    params: dict[str, Any] = {"key": key, "max": max_results}
    if since:
        params["begin_ms"] = parse_time_ms(since)
    if until:
        params["end_ms"] = parse_time_ms(until)
    with client(url, token) as http:
        found = call(http, "GET", f"/topics/{topic}/messages", params=params)
    emit(output, found, rows=found["messages"], columns=MESSAGE_COLUMNS)
    if not found["messages"]:
        raise typer.Exit(int(Exit.NOT_FOUND))


@app.command()
def offsets(
    topic: str,
    at: Annotated[str, typer.Option(help="A time: ms, ISO 8601 (UTC), or -30m/-2h/-1d.")],
    queue_id: Annotated[int | None, typer.Option("--queue", help="One queue (default: every queue).")] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Per queue, the first offset stored at or after a time (kcat -Q, RocketMQ searchOffset)."""
    when = parse_time_ms(at)
    with client(url, token) as http:
        count = call(http, "GET", f"/topics/{topic}")["queues"]
        queues = [queue_id] if queue_id is not None else list(range(count))
        rows = [
            call(http, "GET", f"/topics/{topic}/queues/{q}/offset", params={"timestamp_ms": when})
            for q in queues
        ]
    emit(output, {"topic": topic, "timestamp_ms": when, "offsets": rows}, rows=rows,
         columns=("queue_id", "timestamp_ms", "offset"))  # fmt: skip
