"""``sparkmq``: run the broker and talk to it.

``sparkmq serve`` is the main job. The other commands are thin HTTP clients for a running broker
(``--url``, ``--token``; environment ``SPARKMQ_URL`` / ``SPARKMQ_TOKEN``).

Other front doors (the Kafka gateway) add themselves to ``serve`` through :data:`SERVE_COMPANIONS`:
a function that receives the parsed ``serve`` options and returns companions to run alongside
the HTTP API on the same event loop (see :mod:`ingest_api.http.app`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from ingest_api.http.app import Companion
from ingest_api.http.config import ServerConfig
from ingest_api.http.server import serve as run_server
from store import FlushDiskType, InvalidArgument, StoreConfig

app = typer.Typer(help="sparkmq: a RocketMQ-compatible message queue native to Spark.", no_args_is_help=True)
topics_app = typer.Typer(help="Create and list topics on a running broker.", no_args_is_help=True)
app.add_typer(topics_app, name="topics")


class FlushMode(StrEnum):
    sync = "sync"
    # "async" is a keyword, hence the alias.
    async_ = "async"


@dataclass(frozen=True)
class ServeOptions:
    """The parsed ``serve`` command line, handed to companion factories."""

    config: ServerConfig
    extra: dict[str, Any]


def _kafka_companions(options: ServeOptions) -> list[Companion]:
    """The Kafka gateway, when ``--kafka-port`` is given."""
    if options.extra.get("kafka_port") is None:
        return []
    # Imported only when asked for, so the HTTP broker never depends on the gateway's code.
    from ingest_api.kafka.companion import serve_companions

    return list(serve_companions(options))


def _operator_companions(options: ServeOptions) -> list[Companion]:
    """The operator job as a supervised child process, unless ``--operators off``."""
    if options.extra.get("operators", "local") != "local":
        return []
    from ingest_api.http.operators import OperatorSupervisor, job_argv, supervised

    cfg = options.config
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host
    checkpoint_dir = Path(options.extra.get("checkpoint_dir", "checkpoints")).resolve() / "operators"
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    argv = job_argv(
        f"http://{host}:{cfg.port}",
        Path(cfg.store.store_dir).resolve(),
        checkpoint_dir,
        str(options.extra.get("operators_master", "local[2]")),
    )
    supervisor = OperatorSupervisor(argv, log_path=checkpoint_dir / "operator-job.log")

    def companion(broker: Any) -> Any:
        return supervised(broker.operators, supervisor)

    return [companion]


#: Factories of companions run with ``serve`` (each may return none).
SERVE_COMPANIONS: list[Callable[[ServeOptions], list[Companion]]] = [_kafka_companions, _operator_companions]


@app.command()
def serve(
    *,
    store_dir: Annotated[Path, typer.Option(help="Store directory (created if missing).")] = Path("data"),
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8080,
    auth_file: Annotated[
        Path | None, typer.Option(help="JSON bearer-token file (see docs/http_api.md); off when absent.")
    ] = None,
    flush: Annotated[
        FlushMode, typer.Option(help="sync: a 201 means fsynced; async: flushed periodically.")
    ] = (FlushMode.async_),
    auto_create_topics: Annotated[bool, typer.Option(help="Create unknown topics on first produce.")] = True,
    default_queues: Annotated[int, typer.Option(help="Queues of an auto-created topic.")] = 8,
    max_batch: Annotated[int, typer.Option(help="Most messages in one messages:batch request.")] = 10_000,
    max_request_mib: Annotated[int, typer.Option(help="Largest request body, in MiB.")] = 64,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = False,
    kafka_port: Annotated[
        int | None, typer.Option(help="Also serve the Kafka wire protocol on this port (off when absent).")
    ] = None,
    kafka_host: Annotated[
        str | None, typer.Option(help="Kafka gateway bind address (default: --host).")
    ] = None,
    kafka_advertised_host: Annotated[
        str | None, typer.Option(help="Host the Kafka gateway tells clients to connect to.")
    ] = None,
    operators: Annotated[
        str,
        typer.Option(help="local: run the stateful operators (delayed delivery) as a child Spark job; off."),
    ] = "local",
    operators_master: Annotated[
        str, typer.Option(help="Spark master of the local operator job.")
    ] = "local[2]",
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Root of the operator job's Spark checkpoints.")
    ] = Path("checkpoints"),
) -> None:
    """Run the broker: open the store and serve the HTTP API until SIGTERM or Ctrl-C."""
    store_dir.mkdir(parents=True, exist_ok=True)
    try:
        store_config = StoreConfig(
            store_dir=store_dir,
            flush_disk_type=FlushDiskType.SYNC_FLUSH
            if flush is FlushMode.sync
            else FlushDiskType.ASYNC_FLUSH,
            auto_create_topics=auto_create_topics,
            default_queues_per_topic=default_queues,
        ).validate()
        config = ServerConfig(
            store=store_config,
            host=host,
            port=port,
            auth_file=auth_file,
            max_batch_messages=max_batch,
            max_request_bytes=max_request_mib << 20,
            log_level=log_level,
            access_log=access_log,
            relocation_fault=os.environ.get("SPARKMQ_TEST_RELOCATION_FAULT"),
            relocation_chunk_rows=int(os.environ.get("SPARKMQ_TEST_RELOCATION_CHUNK_ROWS", "65536")),
        ).validate()
    except InvalidArgument as exc:
        typer.echo(f"sparkmq serve: {exc}", err=True)
        raise typer.Exit(2) from None
    if operators not in ("local", "off"):
        typer.echo(f"sparkmq serve: --operators must be local or off, got {operators!r}", err=True)
        raise typer.Exit(2)
    extra = {
        "operators": operators,
        "operators_master": operators_master,
        "checkpoint_dir": str(checkpoint_dir),
        "kafka_port": kafka_port,
        "kafka_host": kafka_host,
        "kafka_advertised_host": kafka_advertised_host,
    }
    options = ServeOptions(
        config=config, extra={name: value for name, value in extra.items() if value is not None}
    )
    companions = [companion for factory in SERVE_COMPANIONS for companion in factory(options)]
    if not run_server(config, companions):
        typer.echo("sparkmq serve: the broker failed to start (see the log above)", err=True)
        raise typer.Exit(1)


# HTTP client commands ------------------------------------------------------------------------
UrlOption = Annotated[str, typer.Option(envvar="SPARKMQ_URL", help="Broker base URL.")]
TokenOption = Annotated[str | None, typer.Option(envvar="SPARKMQ_TOKEN", help="Bearer token.")]


def _client(url: str, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(10.0, read=70.0))


def _checked(response: httpx.Response) -> Any:
    if response.is_error:
        typer.echo(f"error {response.status_code}: {response.text}", err=True)
        raise typer.Exit(1)
    return response.json()


@topics_app.command("create")
def topics_create(
    topic: str,
    queues: Annotated[int, typer.Option(help="Queue count (an existing topic only grows).")] = 8,
    url: UrlOption = "http://127.0.0.1:8080",
    token: TokenOption = None,
) -> None:
    """Create a topic or grow its queue count."""
    with _client(url, token) as client:
        typer.echo(json.dumps(_checked(client.put(f"/topics/{topic}", json={"queues": queues}))))


@topics_app.command("list")
def topics_list(url: UrlOption = "http://127.0.0.1:8080", token: TokenOption = None) -> None:
    """List topics and their queue counts."""
    with _client(url, token) as client:
        for entry in _checked(client.get("/topics"))["topics"]:
            typer.echo(f"{entry['topic']}\t{entry['queues']}")


@app.command()
def produce(
    topic: str,
    *,
    body: Annotated[
        str | None, typer.Argument(help="Message body; one message per stdin line when absent.")
    ] = None,
    tags: Annotated[str | None, typer.Option(help="TAGS of every message.")] = None,
    key: Annotated[list[str] | None, typer.Option(help="A key (repeatable).")] = None,
    url: UrlOption = "http://127.0.0.1:8080",
    token: TokenOption = None,
) -> None:
    """Produce one message, or every stdin line as one batch."""

    def entry(text: str) -> dict[str, Any]:
        return {"body": text, "tags": tags, "keys": key or []}

    with _client(url, token) as client:
        if body is not None:
            typer.echo(json.dumps(_checked(client.post(f"/topics/{topic}/messages", json=entry(body)))))
            return
        lines = [line.rstrip("\n") for line in sys.stdin]
        if lines:
            results = _checked(
                client.post(f"/topics/{topic}/messages:batch", json={"messages": [entry(x) for x in lines]})
            )
            typer.echo(f"produced {len(results['results'])} messages")


@app.command()
def consume(
    topic: str,
    *,
    queue_id: Annotated[int, typer.Option("--queue", help="Queue id.")] = 0,
    offset: Annotated[int, typer.Option(help="Queue offset to start from.")] = 0,
    max_messages: Annotated[int, typer.Option(help="Stop after this many messages.")] = 32,
    wait_ms: Annotated[int, typer.Option(help="Long-poll time when nothing is there yet.")] = 0,
    url: UrlOption = "http://127.0.0.1:8080",
    token: TokenOption = None,
) -> None:
    """Print messages of one queue as JSON lines, then the next offset on stderr."""
    with _client(url, token) as client:
        params = {"offset": offset, "max_messages": max_messages, "wait_ms": wait_ms}
        pulled = _checked(client.get(f"/topics/{topic}/queues/{queue_id}/messages", params=params))
        for message in pulled["messages"]:
            typer.echo(json.dumps(message))
        typer.echo(f"next_offset={pulled['next_offset']}", err=True)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def operators(ctx: typer.Context) -> None:
    """Run the operator job (delayed delivery) against a broker, e.g. on a Spark cluster:
    ``sparkmq operators --endpoint http://broker:8080 --master spark://host:7077``
    (``--help`` lists its options)."""
    from streaming.operators.runtime import main as run_operators

    raise typer.Exit(run_operators(list(ctx.args)))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
