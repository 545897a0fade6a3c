"""What the client commands share: one client set-up (:func:`connect`), the broker options
(``--endpoint``/``--url``, ``--token``), ``--output table|json``, exit codes.

Exit codes (for scripts):

==  =====================================================================
0   success
1   the broker refused or failed the request (4xx other than 404, 5xx)
2   bad usage (a wrong option, or a destructive command without --yes)
3   not found (unknown topic, group or message)
4   the broker is unreachable
5   unhealthy (``sparkmq health``)
6   the store is in use by another process (offline ``store`` tools)
7   the store is damaged (``sparkmq store verify``)
==  =====================================================================
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Annotated, Any, NoReturn

import typer

from sparkmq.client import (
    BrokerUnreachable,
    Client,
    ClientConfig,
    ClientError,
    InvalidArgument,
    NotFound,
    RetryPolicy,
)
from store import wall_clock_ms


class Exit(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    NOT_FOUND = 3
    UNREACHABLE = 4
    UNHEALTHY = 5
    STORE_IN_USE = 6
    STORE_DAMAGED = 7


class Output(StrEnum):
    table = "table"
    json = "json"


EndpointOption = Annotated[
    str,
    typer.Option(
        "--endpoint",
        "--url",
        envvar="SPARKMQ_URL",
        help="Bootstrap brokers: any broker's base URL (a cluster's other brokers and replica "
        "members are found from it); several, comma-separated, are tried in turn.",
    ),
]
#: The option's former name (``--url`` still works).
UrlOption = EndpointOption
TokenOption = Annotated[str | None, typer.Option(envvar="SPARKMQ_TOKEN", help="Bearer token.")]
OutputOption = Annotated[
    Output, typer.Option("--output", "-o", help="table (for people) or json (for scripts).")
]
DEFAULT_ENDPOINT = DEFAULT_URL = "http://127.0.0.1:8080"
#: The commands give up on a retriable fault sooner than a long-running program would.
CLI_CONFIG = ClientConfig(retry=RetryPolicy(deadline_ms=10_000))


def fail(message: str, code: Exit) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(int(code))


def exit_code(error: ClientError) -> Exit:
    """The exit code of a client fault (see the table above)."""
    if isinstance(error, NotFound):
        return Exit.NOT_FOUND
    if isinstance(error, BrokerUnreachable):
        return Exit.UNREACHABLE
    if isinstance(error, InvalidArgument):
        return Exit.USAGE
    return Exit.ERROR


@contextmanager
def connect(endpoint: str, token: str | None) -> Iterator[Client]:
    """The one client set-up of every broker command: a route-aware :class:`Client` whose
    faults end the command with their message and exit code."""
    try:
        tls_ca = os.environ.get("SPARKMQ_TLS_CA") or None  # sparkmq --tls-ca sets it too
        client = Client(endpoint, token=token, tls_ca=tls_ca, config=CLI_CONFIG)
    except InvalidArgument as exc:
        fail(str(exc), Exit.USAGE)
    try:
        with client:
            yield client
    except ClientError as exc:
        fail(str(exc), exit_code(exc))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def table(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned columns with a header (upper-case names, like mqadmin)."""
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    header = [column.upper() for column in columns]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def emit(output: Output, document: Any, rows: Iterable[dict[str, Any]] | None = None,
         columns: Sequence[str] = ()) -> None:  # fmt: skip
    """JSON: ``document`` as one line. Table: ``rows`` (default: the document itself) in ``columns``."""
    if output is Output.json:
        typer.echo(json.dumps(document, ensure_ascii=False))
        return
    if rows is None:
        rows = document if isinstance(document, list) else [document]
    typer.echo(table(rows, columns))


_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^-(\d+)(ms|s|m|h|d)$")


def parse_time_ms(text: str, now_ms: int | None = None) -> int:
    """Milliseconds since the epoch from ms digits, an ISO 8601 date-time (UTC when no zone is
    given) or a relative ``-30m`` / ``-2h`` / ``-1d`` (before now). Exits 2 on anything else."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    relative = _DURATION.match(text)
    if relative:
        now = wall_clock_ms() if now_ms is None else now_ms
        return now - int(relative.group(1)) * _DURATION_UNITS_MS[relative.group(2)]
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        fail(f"not a time: {text!r} (ms since the epoch, ISO 8601, or -30m/-2h/-1d)", Exit.USAGE)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
