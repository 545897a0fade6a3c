"""``sparkmq groups``: list, describe (lag in messages and seconds, Kafka members), reset.

``groups reset`` is a dry run unless ``--execute`` is given, like ``kafka-consumer-groups
--reset-offsets``: it prints, per queue, the committed offset and where it would move.
"""

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
    parse_time_ms,
)
from sparkmq.cli.root import groups_app


@groups_app.command("list")
def groups_list(
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Groups with committed offsets and the topics they have them for."""
    with connect(endpoint, token) as sparkmq:
        listed = sparkmq.request("GET", "/groups")
    rows = [{"group": g, "topics": ", ".join(ts)} for g, ts in sorted(listed["groups"].items())]
    emit(output, listed, rows=rows, columns=("group", "topics"))


@groups_app.command("describe")
def groups_describe(
    group: str,
    topic: Annotated[str | None, typer.Option(help="Only this topic.")] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Per topic and queue: committed offset, max offset, lag in messages and seconds; members
    of a Kafka group."""
    with connect(endpoint, token) as sparkmq:
        described = sparkmq.request("GET", f"/groups/{group}", params={"topic": topic} if topic else None)
    if output is Output.json:
        emit(output, described)
        return
    typer.echo(f"group {described['group']} ({described['kind']}), total lag {described['total_lag']}")
    if described["kind"] == "kafka":
        typer.echo(f"state {described['kafka_state']}, {len(described['members'])} member(s)")
        if described["members"]:
            emit(
                output,
                described,
                rows=described["members"],
                columns=("member_id", "client_id", "client_host"),
            )
    columns = ("topic", "queue_id", "committed_offset", "max_offset", "lag", "lag_seconds")
    emit(output, described, rows=described["queues"], columns=columns)


def _target(to: str | None, shift_by: int | None) -> dict[str, Any]:
    if (to is None) == (shift_by is None):
        fail("give exactly one of --to and --shift-by", Exit.USAGE)
    if shift_by is not None:
        return {"to": "shift", "shift_by": shift_by}
    assert to is not None
    if to in ("earliest", "latest"):
        return {"to": to}
    return {"timestamp_ms": parse_time_ms(to)}


@groups_app.command("reset")
def groups_reset(
    group: str,
    topic: Annotated[str, typer.Option(help="Topic whose offsets move.")],
    to: Annotated[
        str | None, typer.Option(help="earliest, latest, or a time (ms, ISO 8601 UTC, -30m/-2h/-1d).")
    ] = None,
    shift_by: Annotated[int | None, typer.Option(help="Move by N messages (negative: re-read).")] = None,
    queue_id: Annotated[int | None, typer.Option("--queue", help="Only this queue.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Commit the reset (default: dry run).")] = False,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Reset a group's offsets on a topic: a dry run by default, ``--execute`` to commit."""
    body = {"topic": topic, "dry_run": not execute, **_target(to, shift_by)}
    if queue_id is not None:
        body["queue_id"] = queue_id
    with connect(endpoint, token) as sparkmq:
        planned = sparkmq.request("POST", f"/groups/{group}/reset", json=body)
    if output is Output.table:
        typer.echo("committed:" if execute else "dry run (nothing committed; add --execute):")
    columns = ("queue_id", "current", "target", "change", "min_offset", "max_offset")
    emit(output, planned, rows=planned["queues"], columns=columns)
