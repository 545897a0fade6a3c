"""``sparkmq consume``: print a topic's messages, every queue read at its owner.

``consume`` reads every queue of a topic (or one ``--queue``) from ``--from`` (earliest,
latest, ``-N`` for the last N per queue, a time, or the ``--group``'s committed offsets), stops
at the end unless ``--follow``, and with ``--group G --commit`` commits what it printed. With
``--pop --group G`` it competes with the group's other consumers instead and acks what it
printed (:mod:`sparkmq.cli.consume_pop`).
``--format`` takes kcat-like tokens: ``%t`` topic, ``%q`` queue, ``%o`` offset, ``%k`` keys,
``%s`` body (base64 when not UTF-8), ``%T`` store time (ms), ``%B`` born time (ms), ``%g`` tags,
``%i`` msg id, ``%u`` UNIQ_KEY, ``%h`` properties (JSON), ``%b`` broker, ``%%``, ``\\n`` and ``\\t``.

Queues whose broker is down are named on stderr at the end, and the exit code is then 4.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

import typer

from sparkmq.cli.common import (
    DEFAULT_ENDPOINT,
    EndpointOption,
    Exit,
    Output,
    OutputOption,
    TokenOption,
    connect,
    fail,
    parse_time_ms,
)
from sparkmq.cli.consume_pop import consume_pop
from sparkmq.cli.message_format import render
from sparkmq.cli.root import app
from sparkmq.client import Client, Consumer, ReceivedMessage, Start

#: Most messages one poll asks for.
PULL_CHUNK = 1000


def _start(
    sparkmq: Client, topic: str, queues: list[int] | None, start: str, group: str | None, offset: int | None
) -> Start:
    """Where the consumer starts, from ``--from``/``--offset``."""
    if offset is not None:
        return dict.fromkeys(queues or range(sparkmq.route(topic).queue_count), offset)
    if start == "committed":
        if group is None:
            fail("--from committed needs --group", Exit.USAGE)
        return "committed"
    if start in ("earliest", "latest"):
        return "earliest" if start == "earliest" else "latest"
    wanted = set(queues) if queues is not None else None
    if re.fullmatch(r"-\d+", start):
        last = int(start[1:])
        return {
            row.queue_id: max(row.min_offset or 0, (row.max_offset or 0) - last)
            for row in sparkmq.queue_offsets(topic)
            if wanted is None or row.queue_id in wanted
        }
    at = parse_time_ms(start)
    every = queues if queues is not None else range(sparkmq.route(topic).queue_count)
    return {q: sparkmq.offset_at(topic, q, at) for q in every}


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
    wait_ms: Annotated[int, typer.Option(help="Long-poll (every queue at once) while following.")] = 500,
    pop: Annotated[
        bool, typer.Option("--pop", help="Compete with the --group's other consumers; ack what is printed.")
    ] = False,
    invisible_ms: Annotated[int, typer.Option(help="With --pop: how long a message stays hidden.")] = 30_000,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.json,
) -> None:
    """Print messages of every queue (JSON lines, a table, or ``--format``); the next offset per
    queue goes to stderr at the end."""
    if commit and group is None:
        fail("--commit needs --group", Exit.USAGE)
    if pop:
        _consume_pop(topic, group, queue_id, start, commit, max_messages, follow, wait_ms, invisible_ms,
                     tags, fmt, endpoint, token, output)  # fmt: skip
        return
    end_ms = parse_time_ms(until) if until else None
    queues = [queue_id] if queue_id is not None else None
    with connect(endpoint, token) as sparkmq:
        begin = _start(sparkmq, topic, queues, start or ("committed" if group else "earliest"), group, offset)
        with sparkmq.consumer(topic, group=group, queues=queues, start=begin, tags=tags) as consumer:
            _print_until_done(consumer, max_messages, follow, wait_ms, end_ms, commit, fmt, output)
            positions, unavailable = consumer.positions, consumer.unavailable
    typer.echo("next_offsets=" + json.dumps({str(q): o for q, o in positions.items()}), err=True)
    if unavailable:
        where = ", ".join(f"{q} ({broker})" for q, broker in unavailable.items())
        fail(f"queues not read (their broker is down): {where}", Exit.UNREACHABLE)


def _consume_pop(
    topic: str, group: str | None, queue_id: int | None, start: str | None, commit: bool,
    max_messages: int | None, follow: bool, wait_ms: int, invisible_ms: int, tags: str | None,
    fmt: str | None, endpoint: str, token: str | None, output: Output,
) -> None:  # fmt: skip
    if group is None:
        fail("--pop needs --group", Exit.USAGE)
    if queue_id is not None or start is not None or commit:
        fail("--pop hands out messages of every queue: no --queue, --from or --commit", Exit.USAGE)
    consume_pop(endpoint, token, topic, group, max_messages=max_messages, follow=follow, wait_ms=wait_ms,
                invisible_ms=invisible_ms, tags=tags, fmt=fmt, output=output)  # fmt: skip


def _print_until_done(
    consumer: Consumer,
    max_messages: int | None,
    follow: bool,
    wait_ms: int,
    end_ms: int | None,
    commit: bool,
    fmt: str | None,
    output: Output,
) -> None:
    """Poll and print until the end (or forever with ``follow``), ``max_messages`` at most;
    a queue stops at its first message stored after ``end_ms``."""
    printed = 0
    stopped: set[int] = set()
    while max_messages is None or printed < max_messages:
        limit = PULL_CHUNK if max_messages is None else min(PULL_CHUNK, max_messages - printed)
        # without --follow a short wait still lets queues in a retry backoff come round
        for message in consumer.poll(max_messages=limit, wait_ms=wait_ms if follow else min(wait_ms, 100)):
            if message.queue_id in stopped:
                continue
            if end_ms is not None and message.store_timestamp > end_ms:
                consumer.seek(message.queue_id, message.queue_offset)
                consumer.pause(message.queue_id)
                stopped.add(message.queue_id)
                continue
            _print(message, consumer.topic, fmt, output)
            printed += 1
        if commit:
            consumer.commit()
        if len(stopped) == len(consumer.queues) or (not follow and consumer.caught_up):
            return


def _print(message: ReceivedMessage, topic: str, fmt: str | None, output: Output) -> None:
    document = message.raw
    if fmt is not None:
        typer.echo(render({**document, "broker": message.broker}, topic, fmt), nl=False)
    elif output is Output.table:
        typer.echo(render(document, topic, "%q\t%o\t%g\t%k\t%s"))
    else:
        typer.echo(json.dumps(document, ensure_ascii=False))
