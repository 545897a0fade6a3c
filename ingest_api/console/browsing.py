"""Non-destructive message reads for the console: browse by offset, time window or newest N,
lookups by id / UNIQ_KEY / key, and a body shown as text, hex or JSON.

Reads never commit an offset. Each read has a budget (``MAX_BROWSE`` messages per queue) and
says when it stopped early (``truncated``) instead of scanning without end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from store import Boundary, InvalidArgument, MessageStore, MessageView

MAX_BROWSE = 10_000
BodyView = Literal["text", "hex", "json"]
BrowseMode = Literal["offset", "time", "newest"]
LookupKind = Literal["id", "key"]


@dataclass(frozen=True)
class BrowseQuery:
    topic: str
    mode: BrowseMode
    #: ``None``: every queue (time window and newest N only).
    queue_id: int | None
    offset: int = 0
    begin_ms: int = 0
    end_ms: int = 2**62
    limit: int = 50


@dataclass(frozen=True)
class BrowseResult:
    messages: list[MessageView]
    truncated: bool
    #: Offset mode: where the next page starts.
    next_offset: int | None = None


def _read(store: MessageStore, topic: str, queue_id: int, offset: int, limit: int) -> list[MessageView]:
    messages: list[MessageView] = []
    while len(messages) < limit:
        result = store.get_messages(topic, queue_id, offset, min(limit - len(messages), 256))
        if not result.messages or result.next_offset <= offset:
            break
        messages.extend(result.messages)
        offset = result.next_offset
    return messages


def browse(store: MessageStore, query: BrowseQuery) -> BrowseResult:
    limit = min(max(query.limit, 1), MAX_BROWSE)
    queues = range(store.queue_count(query.topic)) if query.queue_id is None else [query.queue_id]
    if query.mode == "offset":
        if query.queue_id is None:
            raise InvalidArgument("browsing by offset needs a queue")
        start = max(query.offset, store.min_offset(query.topic, query.queue_id))
        found = _read(store, query.topic, query.queue_id, start, limit + 1)
        next_offset = found[limit].queue_offset if len(found) > limit else None
        return BrowseResult(found[:limit], len(found) > limit, next_offset)
    if query.mode == "newest":
        newest: list[MessageView] = []
        for queue_id in queues:
            low, high = store.min_offset(query.topic, queue_id), store.max_offset(query.topic, queue_id)
            newest.extend(_read(store, query.topic, queue_id, max(low, high - limit), limit))
        newest.sort(key=lambda m: (m.store_timestamp_ms, m.commitlog_offset), reverse=True)
        return BrowseResult(newest[:limit], len(newest) > limit)
    window: list[MessageView] = []
    truncated = False
    for queue_id in queues:
        start = store.offset_for_timestamp(query.topic, queue_id, query.begin_ms, Boundary.LOWER)
        found = _read(store, query.topic, queue_id, start, limit + 1)
        inside = [m for m in found if m.store_timestamp_ms <= query.end_ms]
        truncated = truncated or len(inside) > limit
        window.extend(inside[:limit])
    window.sort(key=lambda m: (m.store_timestamp_ms, m.commitlog_offset))
    return BrowseResult(window[:limit], truncated or len(window) > limit)


def lookup(
    store: MessageStore, kind: LookupKind, value: str, topic: str | None, limit: int = 64
) -> list[MessageView]:
    """``id``: an offsetMsgId (32 hex digits), else a UNIQ_KEY (in ``topic`` or every topic);
    ``key``: messages with that key in ``topic``, newest first."""
    value = value.strip()
    if kind == "key":
        if not topic:
            raise InvalidArgument("a key lookup needs a topic")
        return store.query_by_key(topic, value, max_results=limit)
    if len(value) == 32:
        try:
            view = store.get_by_msg_id(value)
        except InvalidArgument:
            view = None
        if view is not None and view.msg_id.upper() == value.upper():
            return [view]
    candidates = [topic] if topic else sorted(store.topics())
    for candidate in candidates:
        if store.has_topic(candidate):
            found = store.get_by_uniq_key(candidate, value)
            if found is not None:
                return [found]
    return []


def render_body(body: bytes, view: BodyView) -> str:
    """The body as UTF-8 text (undecodable bytes replaced), a hex dump, or pretty JSON (or a
    note saying it is not JSON)."""
    if view == "hex":
        lines = []
        for start in range(0, min(len(body), 64 * 1024), 16):
            chunk = body[start : start + 16]
            text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
            lines.append(f"{start:08x}  {chunk.hex(' '):<47}  {text}")
        return "\n".join(lines)
    if view == "json":
        try:
            return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return f"(not JSON: {exc})"
    return body.decode("utf-8", errors="replace")
