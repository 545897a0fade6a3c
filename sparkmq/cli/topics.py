"""``sparkmq topics``: create, list, describe (per-queue offsets), delete."""

from __future__ import annotations

from typing import Annotated, Any

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
)
from sparkmq.cli.root import topics_app


@topics_app.command("create")
def topics_create(
    topic: str,
    queues: Annotated[int, typer.Option(help="Queue count (an existing topic only grows).")] = 8,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Create a topic or grow its queue count."""
    with client(url, token) as http:
        created = call(http, "PUT", f"/topics/{topic}", json={"queues": queues})
    emit(output, created, columns=("topic", "queues"))


@topics_app.command("list")
def topics_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, output: OutputOption = Output.table
) -> None:
    """List topics and their queue counts."""
    with client(url, token) as http:
        listed = call(http, "GET", "/topics")
    emit(output, listed, rows=listed["topics"], columns=("topic", "queues"))


@topics_app.command("describe")
def topics_describe(
    topic: str,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Per queue: min offset, max offset (next to be written) and messages retained."""
    with client(url, token) as http:
        described = call(http, "GET", f"/topics/{topic}")
    rows: list[dict[str, Any]] = [
        {**q, "messages": q["max_offset"] - q["min_offset"]} for q in described.get("queue_offsets") or []
    ]
    emit(output, described, rows=rows, columns=("queue_id", "min_offset", "max_offset", "messages"))


@topics_app.command("delete")
def topics_delete(
    topic: str,
    yes: Annotated[bool, typer.Option("--yes", help="Really delete (required).")] = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
) -> None:
    """Delete a topic, its queues and its group offsets (needs --yes)."""
    if not yes:
        fail(f"refusing to delete topic {topic!r} without --yes", Exit.USAGE)
    with client(url, token) as http:
        call(http, "DELETE", f"/topics/{topic}")
    typer.echo(f"deleted topic {topic}")
