"""``sparkmq topics``: create, list, describe (per-queue offsets, read at each queue's owner), delete."""

from __future__ import annotations

from typing import Annotated, Any

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
)
from sparkmq.cli.root import topics_app
from sparkmq.client import LOCAL_BROKER


@topics_app.command("create")
def topics_create(
    topic: str,
    queues: Annotated[int, typer.Option(help="Queue count (an existing topic only grows).")] = 8,
    broker: Annotated[
        list[str] | None,
        typer.Option(help="Place the new queues on these brokers only (repeatable; default: the live ones)."),
    ] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Create a topic or grow its queue count."""
    with connect(endpoint, token) as sparkmq:
        created = sparkmq.create_topic(topic, queues, brokers=broker)
    emit(output, created, columns=("topic", "queues"))


@topics_app.command("list")
def topics_list(
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """List topics and their queue counts."""
    with connect(endpoint, token) as sparkmq:
        listed = sparkmq.topics()
    emit(output, {"topics": listed}, rows=listed, columns=("topic", "queues"))


@topics_app.command("describe")
def topics_describe(
    topic: str,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Per queue: min offset, max offset (next to be written) and messages retained, as the
    queue's owner reports them (in a cluster also its broker)."""
    with connect(endpoint, token) as sparkmq:
        described = sparkmq.describe_topic(topic)
    rows: list[dict[str, Any]] = [
        {**q, "messages": None if q["max_offset"] is None else q["max_offset"] - q["min_offset"]}
        for q in described["queue_offsets"]
    ]
    columns = ["queue_id", "min_offset", "max_offset", "messages"]
    if any(q["broker"] != LOCAL_BROKER for q in rows):
        columns += ["broker", "alive"]
    emit(output, described, rows=rows, columns=columns)


@topics_app.command("delete")
def topics_delete(
    topic: str,
    yes: Annotated[bool, typer.Option("--yes", help="Really delete (required).")] = False,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
) -> None:
    """Delete a topic, its queues and its group offsets (needs --yes)."""
    if not yes:
        fail(f"refusing to delete topic {topic!r} without --yes", Exit.USAGE)
    with connect(endpoint, token) as sparkmq:
        sparkmq.delete_topic(topic)
    typer.echo(f"deleted topic {topic}")
