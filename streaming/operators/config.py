"""The operator job's settings (:class:`JobConfig`) and its command line (:func:`parse_args`)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster import InvalidBootstrapAddress, parse_bootstrap
from streaming.operators.names import QUERIES, parse_queries

DESCRIPTION = "The operator job: a Spark driver running the resolver queries against one broker."


@dataclass(frozen=True)
class JobConfig:
    """Everything the operator job needs; read from flags at the edge (:func:`main`)."""

    endpoint: str
    checkpoint_dir: Path
    master: str = "local[2]"
    #: The broker's store directory, when the job runs on the same machine (faster reads).
    path: str | None = None
    #: Local mode: the driver JVM's heap cap (it runs the executors too; the heap in use stays
    #: under 200 MB at 5,000 msg/s) and its options (:data:`LOCAL_JVM_OPTIONS`); RocksDB's native
    #: memory for all state stores together.
    driver_memory: str = "512m"
    state_memory_mb: int = 256
    #: The delay resolver's trigger. Its timers fire ``wheel_lookahead_ms`` (10 s) before the due
    #: time and the broker's wheel delivers on time, so a trigger plus a batch or two must fit in
    #: the look-ahead. Every trigger runs a batch, data or not (transformWithState in processing
    #: time): an idle job took 1.71 cores of two at 500 ms, 1.38 at 1 s (``bench.operators_idle``).
    trigger_ms: int = 1000
    #: The transaction and retry resolvers' trigger: their decisions are not due to the second
    #: (check-backs every 30 s, the ladder's first retry after 10 s), and every trigger runs a
    #: batch (transformWithState always does), so they leave the cores to the delay resolver.
    background_trigger_ms: int = 2000
    shards: int = 2
    #: Bearer token of a broker with auth on (``--auth-token``, better ``SPARKMQ_TOKEN``: argv
    #: shows in ``ps``); ``sparkmq serve`` gives its job the broker's own peer credential.
    auth_token: str | None = field(default=None, repr=False)
    #: PEM file the broker's HTTPS certificate is verified with (``--tls-ca``/``SPARKMQ_TLS_CA``;
    #: ``None``: the system's CAs); used by every HTTP call of the job, the source's included.
    tls_ca: str | None = None
    #: (certificate, key) PEM files for a broker that requires client certificates (the job's
    #: own client only: the source's ``--path`` reads need none).
    client_cert: tuple[str, str] | None = None
    request_timeout_s: float = 60.0
    #: Test only: ``<before_post|mid_post|after_post|after_post_ahead>:<marker file>`` kills this
    #: driver (SIGKILL) once, at that point of a batch with relocations (several, ``;``-separated:
    #: one after the other, each in a later life of the job) (``mid_post``: 0.3 s into
    #: its POST, while the broker publishes; ``after_post_ahead``: after the POST of a delay batch
    #: with decisions still due later, held by the broker's wheel) (``SPARKMQ_TEST_OPERATOR_FAULT``).
    fault: str | None = None
    #: Extra Spark settings (``--conf k=v``, or ``SPARKMQ_OPERATOR_CONF="k=v;k=v"``), applied last.
    spark_conf: tuple[tuple[str, str], ...] = ()
    #: The resolver queries this job runs (a subset of :data:`QUERIES`, in that order).
    queries: tuple[str, ...] = QUERIES
    #: One job per checkpoint, and how long it waits for a broker that does not answer before it
    #: exits (0: for ever) (:mod:`streaming.operators.tenure`).
    lock_file: Path | None = None
    broker_grace_s: float = 0.0
    #: Spark's Python daemons without a worker that long are stopped (0: never)
    #: (:mod:`streaming.operators.daemons`).
    daemon_idle_s: float = 10.0


def parse_args(argv: Sequence[str]) -> JobConfig:
    parser = argparse.ArgumentParser(prog="sparkmq operators", description=DESCRIPTION)
    parser.add_argument(
        "--endpoint",
        required=True,
        help="the broker's HTTP base URL; several, comma-separated (its replica group's members), "
        "are tried in turn",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master URL (default local[2]; under spark-submit, spark-submit's --master)",
    )
    parser.add_argument("--checkpoint-dir", default="checkpoints/operators", type=Path)
    parser.add_argument("--path", default=None, help="the broker's store directory (same machine only)")
    parser.add_argument("--trigger-ms", default=JobConfig.trigger_ms, type=int)
    parser.add_argument("--shards", default=2, type=int, help="state partitions (fixed at first start)")
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("SPARKMQ_TOKEN"),
        help="bearer token of a broker with auth on (default: SPARKMQ_TOKEN; prefer it, argv shows in ps)",
    )
    parser.add_argument(
        "--tls-ca",
        default=os.environ.get("SPARKMQ_TLS_CA"),
        help="PEM file verifying the broker's HTTPS certificate (default: SPARKMQ_TLS_CA, else the system's)",
    )
    parser.add_argument(
        "--tls-client-cert", default=None, help="PEM certificate for a broker that requires one"
    )
    parser.add_argument("--tls-client-key", default=None, help="the private key of --tls-client-cert")
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting, key=value")
    parser.add_argument(
        "--queries",
        default=",".join(QUERIES),
        help=f"the resolver queries to run, comma-separated (default: all: {','.join(QUERIES)})",
    )
    parser.add_argument(
        "--lock-file",
        default=None,
        help="held for the job's life, so one job runs per checkpoint (default: job.lock in a local "
        "--checkpoint-dir; none for a remote one, e.g. hdfs://; 'none': no lock)",
    )
    parser.add_argument(
        "--broker-grace-s", default=0.0, type=float, help="exit when no broker answered that long (0: never)"
    )
    parser.add_argument(
        "--daemon-idle-s",
        default=JobConfig.daemon_idle_s,
        type=float,
        help="stop a Spark Python daemon without a worker that long (0: never)",
    )
    args = parser.parse_args(list(argv))
    try:
        queries = parse_queries(args.queries)
    except ValueError as exc:
        parser.error(f"--queries: {exc}")
    if (args.tls_client_cert is None) != (args.tls_client_key is None):
        parser.error("--tls-client-cert and --tls-client-key go together")
    try:
        endpoint = ",".join(parse_bootstrap(args.endpoint))
    except InvalidBootstrapAddress as exc:
        parser.error(f"--endpoint: {exc}")
    return JobConfig(
        endpoint=endpoint,
        checkpoint_dir=args.checkpoint_dir,
        master=args.master if args.master is not None else _default_master(),
        path=args.path,
        trigger_ms=args.trigger_ms,
        shards=args.shards,
        auth_token=args.auth_token,
        tls_ca=args.tls_ca,
        client_cert=(args.tls_client_cert, args.tls_client_key) if args.tls_client_cert else None,
        fault=os.environ.get("SPARKMQ_TEST_OPERATOR_FAULT"),
        spark_conf=_spark_conf([*os.environ.get("SPARKMQ_OPERATOR_CONF", "").split(";"), *args.conf]),
        queries=queries,
        lock_file=_lock_file(args.lock_file, args.checkpoint_dir),
        broker_grace_s=args.broker_grace_s,
        daemon_idle_s=args.daemon_idle_s,
    )


def _spark_conf(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``key=value`` settings (blank items skipped); ``SystemExit`` naming a bad one."""
    out = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--conf {item!r}: expected key=value")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _default_master() -> str:
    """``local[2]``, or nothing under ``spark-submit`` (its ``--master`` and confs apply)."""
    return "" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[2]"


def _lock_file(given: str | None, checkpoint_dir: Path) -> Path | None:
    """``--lock-file``, else ``job.lock`` in a local checkpoint directory (a URI's scheme, such
    as ``hdfs:`` or ``s3a:``, leaves no local file to lock)."""
    if given is not None:
        return None if given.strip().lower() == "none" else Path(given)
    if checkpoint_dir.parts and checkpoint_dir.parts[0].endswith(":"):
        return None
    return checkpoint_dir / "job.lock"
