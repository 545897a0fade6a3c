"""``sparkmq openapi``: the broker's OpenAPI document, without running a broker.

The document a broker serves at ``/openapi.json`` depends on its configuration (auth, batch
and timer limits); the options here are ``serve``'s. ``docs/openapi.json`` is the output with
the defaults (``sparkmq openapi --output docs/openapi.json``), which
``tests/ingest/test_openapi_document.py`` keeps equal to what a default broker serves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from broker.config import ServerConfig
from ingest_api.http.app import broker_openapi
from sparkmq.cli.root import app
from store import InvalidArgument, StoreConfig, parse_duration_ms


def render(document: dict[str, object]) -> str:
    """The document as ``docs/openapi.json`` holds it: indented, keys in document order."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


@app.command("openapi")
def openapi(
    *,
    output: Annotated[Path | None, typer.Option(help="Write the document here (default: stdout).")] = None,
    auth: Annotated[
        bool, typer.Option(help="As a broker with --auth-file serves it (the bearer token required).")
    ] = False,
    internal: Annotated[
        bool, typer.Option(help="Also the operations the operator job and the Spark sink call.")
    ] = False,
    max_batch: Annotated[int, typer.Option(help="As serve --max-batch.")] = 10_000,
    max_request_mib: Annotated[int, typer.Option(help="As serve --max-request-mib.")] = 64,
    timer_max_delay: Annotated[str, typer.Option(help="As serve --timer-max-delay.")] = "3d",
) -> None:
    """Print the OpenAPI document a broker serves with these settings (e.g. to generate a client)."""
    try:
        store = StoreConfig(store_dir=Path("data"), timer_max_delay_ms=parse_duration_ms(timer_max_delay))
        config = ServerConfig(
            store=store, max_batch_messages=max_batch, max_request_bytes=max_request_mib << 20
        ).validate()
    except InvalidArgument as exc:
        typer.echo(f"sparkmq openapi: {exc}", err=True)
        raise typer.Exit(2) from None
    text = render(broker_openapi(config, auth_required=auth, internal=internal))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
