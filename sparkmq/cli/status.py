"""``sparkmq status`` (the broker's figures) and ``sparkmq health`` (an exit code for scripts)."""

from __future__ import annotations

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
)
from sparkmq.cli.root import app


@app.command()
def status(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, output: OutputOption = Output.table
) -> None:
    """Topics, groups, CommitLog positions and traffic per door (``GET /stats``)."""
    with client(url, token) as http:
        stats = call(http, "GET", "/stats")
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
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, output: OutputOption = Output.table
) -> None:
    """Exit 0 when the broker answers healthy, 5 when it answers unhealthy, 4 when unreachable."""
    with client(url, token) as http:
        try:
            response = http.get("/healthz")
        except httpx.TransportError as exc:
            fail(f"cannot reach the broker at {url}: {exc}", Exit.UNREACHABLE)
    document = (
        response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    )
    healthy = response.status_code == 200
    report = {"healthy": healthy, "status_code": response.status_code, **document}
    if output is Output.json:
        emit(output, report)
    else:
        typer.echo("healthy" if healthy else f"unhealthy ({response.status_code}): {response.text}")
    if not healthy:
        raise typer.Exit(int(Exit.UNHEALTHY))
