"""``sparkmq status`` (the broker's figures) and ``sparkmq health`` (an exit code for scripts).

Both ask the first ``--endpoint`` of the list that answers, never a broker learnt from it."""

from __future__ import annotations

from typing import Any

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
)
from sparkmq.cli.root import app
from sparkmq.client import BrokerError


@app.command()
def status(
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Topics, groups, CommitLog positions and traffic per door (``GET /stats``)."""
    with connect(endpoint, token) as sparkmq:
        stats, _ = sparkmq.ask_bootstrap("GET", "/stats")
    if output is Output.json:
        emit(output, stats)
        return
    rows = [{"figure": name, "value": value} for name, value in stats.items() if not isinstance(value, dict)]
    for direction in ("messages_in", "messages_out"):
        rows += [
            {"figure": f"{direction}[{door}]", "value": n} for door, n in sorted(stats[direction].items())
        ]
    emit(output, stats, rows=rows, columns=("figure", "value"))


@app.command()
def health(
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """Exit 0 when the broker answers healthy, 5 when it answers unhealthy, 4 when unreachable."""
    report: dict[str, Any]
    with connect(endpoint, token) as sparkmq:
        try:
            answer, _ = sparkmq.ask_bootstrap("GET", "/healthz")
            report = {"healthy": True, "status_code": 200, **(answer or {})}
        except BrokerError as exc:
            report = {"healthy": False, "status_code": exc.status, "error": exc.code, "message": exc.message}
    if output is Output.json:
        emit(output, report)
    else:
        typer.echo(
            "healthy" if report["healthy"] else f"unhealthy ({report['status_code']}): {report['message']}"
        )
    if not report["healthy"]:
        raise typer.Exit(int(Exit.UNHEALTHY))
