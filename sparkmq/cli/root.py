"""The ``sparkmq`` Typer application and its command groups (commands register themselves)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="sparkmq: a RocketMQ-compatible message queue native to Spark.", no_args_is_help=True)
topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)
groups_app = typer.Typer(help="Consumer groups: list, describe (lag), reset offsets.", no_args_is_help=True)
msg_app = typer.Typer(help="Look messages up by id, UNIQ_KEY, key or position.", no_args_is_help=True)
store_app = typer.Typer(
    help="Offline tools on a store directory no broker is using (they refuse a store in use).",
    no_args_is_help=True,
)
dlq_app = typer.Typer(help="A consumer group's dead letters: list, re-send.", no_args_is_help=True)
tx_app = typer.Typer(help="Transactions: list open ones, commit, roll back.", no_args_is_help=True)
cluster_app = typer.Typer(
    help="A cluster of brokers: status and queue placement; a local ZooKeeper and cluster for trying it.",
    no_args_is_help=True,
)
auth_app = typer.Typer(
    help="Users and certificates: add a user to the users file, make a throw-away CA.", no_args_is_help=True
)
app.add_typer(topics_app, name="topics")
app.add_typer(dlq_app, name="dlq")
app.add_typer(tx_app, name="tx")
app.add_typer(groups_app, name="groups")
app.add_typer(msg_app, name="msg")
app.add_typer(store_app, name="store")
app.add_typer(cluster_app, name="cluster")
app.add_typer(auth_app, name="auth")


@app.callback()
def _global_options(
    tls_ca: Annotated[
        Path | None,
        typer.Option(
            envvar="SPARKMQ_TLS_CA",
            help="CA (PEM) of the brokers' HTTPS certificates, for every command (or SPARKMQ_TLS_CA).",
        ),
    ] = None,
) -> None:
    """sparkmq: a RocketMQ-compatible message queue native to Spark."""
    if tls_ca is not None:  # the commands' clients read it from the environment (cli/common.py)
        os.environ["SPARKMQ_TLS_CA"] = str(tls_ca)
