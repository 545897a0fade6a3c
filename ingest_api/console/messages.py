"""Console pages for messages: browse, one message, lookup, produce form, live tail, export."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from broker.auth import Right
from broker.errors import BrokerError
from broker.produce import check_message_fields, place_message, produce_message, topic_queue_count
from broker.state import Broker
from broker.threads import run_blocking
from ingest_api.console import browsing
from ingest_api.console.data import consumed_by
from ingest_api.console.web import PREFIX, ViewerDep, page
from ingest_api.params import TopicPath
from store import (
    InvalidArgument,
    MessageStore,
    MessageView,
    PutResult,
    SparkMQError,
    UnknownTopic,
    validate_topic,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)

MAX_EXPORT = 10_000
#: Most keys one message may carry (the HTTP API's limit too).
MAX_KEYS = 64
#: A live tail closes after this long (the page offers to reconnect).
TAIL_MAX_S = 600.0
TAIL_POLL_S = 0.25
MAX_BROWSE_PAGE = 500


def parse_when(text: str, default_ms: int) -> int:
    """Milliseconds since the epoch from '', digits (ms) or an ISO date-time (UTC if no zone)."""
    text = text.strip()
    if not text:
        return default_ms
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidArgument(f"not a time: {text!r} (use ms since the epoch or ISO 8601)") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _check_topic(store: MessageStore, topic: str) -> None:
    validate_topic(topic)
    if not store.has_topic(topic):
        raise UnknownTopic(f"topic {topic!r} does not exist")


def _browse(store: MessageStore, query: browsing.BrowseQuery) -> tuple[browsing.BrowseResult, int]:
    _check_topic(store, query.topic)
    return browsing.browse(store, query), store.queue_count(query.topic)


def _query(
    topic: str, mode: str, queue: str, offset: int, begin: str, end: str, limit: int
) -> browsing.BrowseQuery:
    if mode not in ("offset", "time", "newest"):
        raise InvalidArgument(f"unknown mode {mode!r}")
    queue_id = int(queue) if queue.strip().isdigit() else None
    return browsing.BrowseQuery(
        topic=topic,
        mode=mode,  # type: ignore[arg-type]
        queue_id=queue_id if mode != "offset" else (queue_id or 0),
        offset=offset,
        begin_ms=parse_when(begin, 0),
        end_ms=parse_when(end, 2**62),
        limit=limit,
    )


ModeQuery = Annotated[str, Query(max_length=10)]
TextQuery = Annotated[str, Query(max_length=64)]


@router.get("/topics/{topic}/messages", response_class=HTMLResponse)
async def browse(
    request: Request,
    topic: TopicPath,
    viewer: ViewerDep,
    mode: ModeQuery = "newest",
    queue: TextQuery = "",
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    begin: TextQuery = "",
    end: TextQuery = "",
    limit: Annotated[int, Query(ge=1, le=MAX_BROWSE_PAGE)] = 50,
    view: Annotated[browsing.BodyView, Query()] = "text",
) -> HTMLResponse:
    """Non-destructive: reads commit nothing."""
    viewer.require_read(topic)
    query = _query(topic, mode, queue, offset, begin, end, limit)
    result, queues = await run_blocking(_browse, viewer.broker.store, query)
    rows = [(m, browsing.render_body(m.body, view)) for m in result.messages]
    return page(
        request, "browse.html", viewer, section="topics", topic=topic, query=query, result=result,
        rows=rows, queues=queues, view=view, form={"begin": begin, "end": end, "queue": queue},
    )  # fmt: skip


def _message(store: MessageStore, msg_id: str) -> tuple[MessageView, list[tuple[str, int]]] | None:
    found = browsing.lookup(store, "id", msg_id, None)
    return (found[0], consumed_by(store, found[0])) if found else None


@router.get("/messages/{msg_id}", response_class=HTMLResponse)
async def message(
    request: Request, msg_id: str, viewer: ViewerDep, view: Annotated[browsing.BodyView, Query()] = "text"
) -> HTMLResponse:
    found = await run_blocking(_message, viewer.broker.store, msg_id[:128])
    if found is None:
        raise BrokerError(404, "message_not_found", f"no message with id {msg_id!r}")
    message_view, groups = found
    viewer.require_read(message_view.properties.get("REAL_TOPIC", message_view.topic))
    body = browsing.render_body(message_view.body, view)
    return page(
        request, "message.html", viewer, section="lookup", m=message_view, body=body, view=view, groups=groups
    )


def _lookup(
    store: MessageStore, kind: browsing.LookupKind, value: str, topic: str | None
) -> list[tuple[MessageView, list[tuple[str, int]]]]:
    if topic:
        _check_topic(store, topic)
    return [(m, consumed_by(store, m)) for m in browsing.lookup(store, kind, value, topic)]


@router.get("/lookup", response_class=HTMLResponse)
async def lookup(
    request: Request,
    viewer: ViewerDep,
    kind: Annotated[browsing.LookupKind, Query()] = "id",
    value: Annotated[str, Query(max_length=1024)] = "",
    topic: Annotated[str, Query(max_length=255)] = "",
) -> HTMLResponse:
    """By offsetMsgId or UNIQ_KEY (``id``) or by key within a topic, with the groups that
    have consumed each hit."""
    hits: list[tuple[MessageView, list[tuple[str, int]]]] = []
    error = None
    if value.strip():
        try:
            found = await run_blocking(_lookup, viewer.broker.store, kind, value, topic.strip() or None)
        except SparkMQError as exc:
            found, error = [], str(exc)
        hits = [(m, g) for m, g in found if viewer.may_read(m.properties.get("REAL_TOPIC", m.topic))]
    return page(
        request, "lookup.html", viewer, section="lookup", kind=kind, value=value, topic=topic,
        hits=hits, searched=bool(value.strip()), error=error,
    )  # fmt: skip


@router.get("/topics/{topic}/produce", response_class=HTMLResponse)
async def produce_form(request: Request, topic: TopicPath, viewer: ViewerDep) -> HTMLResponse:
    viewer.require(Right.PRODUCE, topic)
    return page(request, "produce.html", viewer, section="topics", topic=topic, result=None, error=None)


def _properties(text: str) -> dict[str, str]:
    pairs = {}
    for line in text.splitlines():
        if line.strip():
            name, sep, value = line.partition("=")
            if not sep:
                raise InvalidArgument(f"property line {line!r} is not name=value")
            pairs[name.strip()] = value.strip()
    return pairs


@router.post("/topics/{topic}/produce", response_class=HTMLResponse)
async def produce(
    request: Request,
    topic: TopicPath,
    viewer: ViewerDep,
    body: Annotated[str, Form(max_length=4 * 1024 * 1024)],
    tags: Annotated[str, Form(max_length=1024)] = "",
    keys: Annotated[str, Form(max_length=4096)] = "",
    properties: Annotated[str, Form(max_length=65536)] = "",
    queue: Annotated[str, Form(max_length=8)] = "",
    sharding_key: Annotated[str, Form(max_length=1024)] = "",
) -> HTMLResponse:
    viewer.require(Right.PRODUCE, topic)
    result: PutResult | None = None
    error = None
    try:
        result = await _produce(viewer.broker, topic, body, tags, keys, properties, queue, sharding_key)
    except (ValueError, SparkMQError, BrokerError) as exc:
        error = str(exc)
    status = 201 if result is not None else 400
    return page(
        request, "produce.html", viewer, status_code=status, section="topics", topic=topic,
        result=result, error=error,
    )  # fmt: skip


async def _produce(
    broker: Broker,
    topic: str,
    body: str,
    tags: str,
    keys: str,
    properties: str,
    queue: str,
    sharding_key: str,
) -> PutResult:
    """Store the form's message through the broker's rules (:mod:`broker.produce`); a refused
    field raises ``ValueError`` or the broker's error, shown on the form."""
    key_list = keys.split()
    if len(key_list) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} keys")
    tag = tags.strip() or None
    props = _properties(properties)
    check_message_fields(tag, key_list, props)
    queue_id = int(queue) if queue.strip().isdigit() else None
    if queue_id is not None and sharding_key.strip():
        raise ValueError("give at most one of 'queue' and 'sharding key'")
    store = broker.store
    message = place_message(
        topic,
        body.encode("utf-8"),
        tags=tag,
        keys=key_list,
        properties=props,
        queue_id=queue_id,
        sharding_key=sharding_key.strip() or None,
        queue_count=await topic_queue_count(broker, topic),
        max_body=store.config.max_message_size_bytes,
        max_delay_ms=store.config.timer_max_delay_ms,
        now_ms=store.now_ms(),
    )
    return await produce_message(broker, message)


@router.get("/topics/{topic}/tail", response_class=HTMLResponse)
async def tail_page(request: Request, topic: TopicPath, viewer: ViewerDep) -> HTMLResponse:
    viewer.require_read(topic)
    await run_blocking(_check_topic, viewer.broker.store, topic)
    return page(request, "tail.html", viewer, section="topics", topic=topic)


def _tail_row(m: MessageView) -> dict[str, Any]:
    return {
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "msg_id": m.msg_id,
        "tags": m.tags,
        "keys": m.keys,
        "store_timestamp": m.store_timestamp_ms,
        "body": m.body.decode("utf-8", errors="replace")[:2000],
    }


def _tail_step(store: MessageStore, topic: str, positions: dict[int, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for queue_id in range(store.queue_count(topic)):
        start = positions.setdefault(queue_id, store.min_offset(topic, queue_id))
        result = store.get_messages(topic, queue_id, start, 64)
        rows.extend(_tail_row(m) for m in result.messages)
        positions[queue_id] = max(start, result.next_offset)
    return rows


def _tail_start(store: MessageStore, topic: str) -> dict[int, int]:
    _check_topic(store, topic)
    return {queue_id: high for queue_id, (_, high) in store.queue_offsets(topic).items()}


@router.get("/topics/{topic}/tail/events")
async def tail_events(request: Request, topic: TopicPath, viewer: ViewerDep) -> StreamingResponse:
    """Server-sent events: one ``message`` event per new message of every queue, from now on."""
    viewer.require_read(topic)
    store = viewer.broker.store
    positions = await run_blocking(_tail_start, store, topic)

    async def events() -> AsyncIterator[str]:
        yield "event: ready\ndata: {}\n\n"
        deadline = time.monotonic() + TAIL_MAX_S
        while time.monotonic() < deadline and not store.closed:
            rows = await run_blocking(_tail_step, store, topic, positions)
            for row in rows:
                yield f"event: message\ndata: {json.dumps(row, ensure_ascii=False)}\n\n"
            if not rows:
                await asyncio.sleep(TAIL_POLL_S)
        yield "event: end\ndata: {}\n\n"

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _export_rows(messages: list[MessageView]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for m in messages:
        text = m.body.decode("utf-8", errors="replace")
        rows.append(
            {
                "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                "msg_id": m.msg_id, "uniq_key": m.uniq_key, "tags": m.tags, "keys": " ".join(m.keys),
                "store_timestamp": m.store_timestamp_ms, "born_timestamp": m.born_timestamp_ms,
                "body": text, "body_hex": m.body.hex() if text.encode() != m.body else None,
                "properties": json.dumps(m.properties, ensure_ascii=False, sort_keys=True),
            }
        )  # fmt: skip
    return rows


@router.get("/topics/{topic}/export")
async def export(
    topic: TopicPath,
    viewer: ViewerDep,
    mode: ModeQuery = "newest",
    queue: TextQuery = "",
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    begin: TextQuery = "",
    end: TextQuery = "",
    limit: Annotated[int, Query(ge=1, le=MAX_EXPORT)] = 1000,
    format: Annotated[str, Query(pattern="^(ndjson|csv)$")] = "ndjson",
) -> Response:
    """The same selection as the browse page, as NDJSON or CSV (a download)."""
    viewer.require_read(topic)
    query = _query(topic, mode, queue, offset, begin, end, limit)
    result, _ = await run_blocking(_browse, viewer.broker.store, query)
    rows = _export_rows(result.messages)
    if format == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else ["topic"])
        writer.writeheader()
        writer.writerows(rows)
        text, media = out.getvalue(), "text/csv"
    else:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        media = "application/x-ndjson"
    headers = {"Content-Disposition": f'attachment; filename="{topic}.{format}"'}
    if result.truncated:
        headers["X-Truncated"] = "true"
    return Response(text, media_type=media, headers=headers)
