"""``sparkmq cluster status`` (the brokers, and where each queue of a topic lives) and
``sparkmq cluster zookeeper`` (a local ZooKeeper in the foreground, for trying a cluster).

``status`` asks the first ``--endpoint`` of the list that answers (its own ZooKeeper session is
shown); a lone broker answers as a cluster of one named ``local``. ``sparkmq cluster local``
(:mod:`sparkmq.cli.local_cluster`) runs ZooKeeper and several brokers together.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer

from cluster.errors import ClusterError
from cluster.local_zookeeper import LocalZooKeeper, ZooKeeperMissing
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
    table,
)
from sparkmq.cli.root import cluster_app
from sparkmq.client.transport import segment

BROKER_COLUMNS = ("name", "alive", "http", "kafka", "queues")
ROUTE_COLUMNS = ("queue_id", "broker", "alive", "http")


@cluster_app.command("status")
def cluster_status(
    topic: Annotated[str | None, typer.Option(help="Also show where each queue of this topic lives.")] = None,
    endpoint: EndpointOption = DEFAULT_ENDPOINT,
    token: TokenOption = None,
    output: OutputOption = Output.table,
) -> None:
    """The brokers (alive, addresses, queue counts) and the asked broker's ZooKeeper session;
    with ``--topic``, each queue's broker."""
    with connect(endpoint, token) as sparkmq:
        described, asked = sparkmq.ask_bootstrap("GET", "/cluster")
        route = sparkmq.request("GET", f"/topics/{segment(topic)}/route", at=asked) if topic else None
    if output is Output.json:
        emit(output, {**described, "route": route} if route is not None else described)
        return
    live = sum(b["alive"] for b in described["brokers"])
    where = f" on {described['cluster']}" if described.get("cluster") else ""
    session = f", ZooKeeper session {described['session']}" if described.get("session") else ""
    typer.echo(
        f"{described['mode']} mode{where}: {live} of {len(described['brokers'])} brokers alive, "
        f"{described['topics']} topics; asked {described['self']}{session}"
    )
    typer.echo(table(described["brokers"], BROKER_COLUMNS))
    members = [
        {"broker": b["name"], "group_epoch": b.get("epoch"), **m}
        for b in described["brokers"]
        for m in b.get("members") or ()
    ]
    if members:  # replica groups: every member's role, epoch and replication lag
        typer.echo("\nreplicas:")
        typer.echo(table(members, MEMBER_COLUMNS))
    for warning in described.get("warnings") or ():
        typer.echo(f"warning: {warning}", err=True)
    if route is not None:
        typer.echo(f"\ntopic {route['topic']}: {len(route['queues'])} queues")
        typer.echo(table(route["queues"], ROUTE_COLUMNS))


#: The replicas table's columns.
MEMBER_COLUMNS = (
    "broker",
    "member_id",
    "role",
    "epoch",
    "replicated_offset",
    "confirm_offset",
    "lag_bytes",
    "http",
)


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM end the foreground commands with ``KeyboardInterrupt`` (also when the
    command was started in the background, where the shell leaves SIGINT ignored)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)


@cluster_app.command("zookeeper")
def cluster_zookeeper(
    port: Annotated[int, typer.Option(help="Client port (on 127.0.0.1).")] = 2181,
    data_dir: Annotated[
        Path, typer.Option(help="Its data, zoo.cfg and zookeeper.log (kept between runs).")
    ] = Path("cluster-data/zookeeper"),
    enforce_auth: Annotated[
        bool,
        typer.Option(
            help="Refuse sessions that do not authenticate (digest): pair with brokers' --zk-auth-file "
            "(docs/security.md#zookeeper-acls)."
        ),
    ] = False,
) -> None:
    """Run a local ZooKeeper (Debian's zookeeper package, on the Java Spark uses) in the
    foreground on 127.0.0.1 until Ctrl-C; for trying ``sparkmq serve --cluster``, not for
    production."""
    server = LocalZooKeeper(data_dir.resolve(), port, enforce_auth=enforce_auth)
    stop_on_signals()
    try:
        server.start()
        typer.echo(
            f"ZooKeeper on {server.address}; brokers join with --cluster {server.url('/sparkmq')}; "
            f"log: {data_dir / 'zookeeper.log'}; Ctrl-C stops it"
        )
        assert server.process is not None
        code = server.process.wait()
    except ZooKeeperMissing as exc:
        fail(f"{exc} (make cluster installs it)", Exit.ERROR)
    except ClusterError as exc:
        fail(f"ZooKeeper did not start: {exc}", Exit.ERROR)
    except KeyboardInterrupt:
        server.stop()  # it runs in a session of its own: Ctrl-C reaches only this process
        typer.echo("ZooKeeper stopped")
        return
    fail(f"ZooKeeper exited with {code}; see {data_dir / 'zookeeper.log'}", Exit.ERROR)
