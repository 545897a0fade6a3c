"""``sparkmq consume --pop --group G``: a competing consumer that acks what it printed.

Any number of these share a group and each message is printed by one of them. A message is
acked after its line is written and flushed; one not acked (the worker was killed between the
print and the ack) comes back to the group after ``--invisible-ms``, so a message may be
printed twice across workers, never lost (POP's at-least-once, docs/pop.md).
"""

from __future__ import annotations

import json
import sys

import typer

from sparkmq.cli.common import Exit, Output, connect, fail
from sparkmq.cli.message_format import render
from sparkmq.client import PopMessage


def consume_pop(
    endpoint: str,
    token: str | None,
    topic: str,
    group: str,
    *,
    max_messages: int | None,
    follow: bool,
    wait_ms: int,
    invisible_ms: int,
    tags: str | None,
    fmt: str | None,
    output: Output,
) -> None:
    """Receive, print, ack until nothing comes (or forever with ``follow``)."""
    printed = refused = 0
    with (
        connect(endpoint, token) as sparkmq,
        sparkmq.simple_consumer(topic, group, invisible_ms=invisible_ms, tags=tags) as consumer,
    ):
        while max_messages is None or printed < max_messages:
            want = 32 if max_messages is None else min(32, max_messages - printed)
            messages = consumer.receive(max_messages=want, wait_ms=wait_ms if follow else min(wait_ms, 500))
            if not messages:
                if follow:
                    continue
                break
            for message in messages:
                _print(message, topic, fmt, output)
            sys.stdout.flush()
            outcomes = consumer.ack(messages)
            printed += len(messages)
            refused += sum(1 for o in outcomes if not o.ok)
    typer.echo(f"printed={printed} ack_refused={refused}", err=True)
    if refused:
        fail(f"{refused} acks were refused (their invisible time had passed: redelivered)", Exit.ERROR)


def _print(message: PopMessage, topic: str, fmt: str | None, output: Output) -> None:
    document = message.message.raw
    if fmt is not None:
        typer.echo(render(document, topic, fmt), nl=False)
    elif output is Output.table:
        typer.echo(render(document, topic, "%q\t%o\t%g\t%k\t%s"))
    else:
        typer.echo(json.dumps(document, ensure_ascii=False))
