"""``sparkmq serve`` (run the broker) and ``sparkmq operators`` (run the operator job).

Other front doors (the Kafka gateway) add themselves to ``serve`` through :data:`SERVE_COMPANIONS`:
a function that receives the parsed ``serve`` options and returns companions to run alongside
the HTTP API on the same event loop (see :mod:`ingest_api.http.app`).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from broker.config import ServerConfig
from broker.lifecycle import Companion
from broker.tls import TlsConfig
from cluster import ClusterConfig, InvalidBrokerName, InvalidClusterAddress, parse_cluster_address
from ingest_api.server import serve as run_server
from sparkmq.cli import serve_cluster_security as sec
from sparkmq.cli.root import app
from store import DEFAULT_DELAY_LEVELS, FlushDiskType, InvalidArgument, StoreConfig, parse_duration_ms

#: ``--operator-job-grace``: how long a job outlives its crashed broker (docs/operators.md).
DEFAULT_OPERATOR_JOB_GRACE = "60s"


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
    try:
        from ingest_api.kafka.companion import serve_companions
    except ImportError as exc:
        raise typer.BadParameter(
            f"the Kafka gateway needs the kafka extra ({exc.name} is missing): pip install 'sparkmq[kafka]'",
            param_hint="--kafka-port",
        ) from exc

    return list(serve_companions(options))


def _remoting_companions(options: ServeOptions) -> list[Companion]:
    """The RocketMQ remoting door, when ``--remoting-port`` is given (with ``--auth-file`` it
    checks every request's access-key signature: docs/remoting.md)."""
    from ingest_api.remoting.companion import serve_companions

    return list(serve_companions(options))


def _operator_companions(options: ServeOptions) -> list[Companion]:
    """The operator job as a supervised child process, unless ``--operators off``; on a secured
    broker it gets https, a CA and a credential (:mod:`broker.operator_job`), or ``serve`` exits 2."""
    if options.extra.get("operators", "local") != "local":
        return []
    from broker.operator_job import LOCK_FILE, TOKEN_ENV, job_launch
    from broker.operators import OperatorSupervisor, supervised

    cfg = options.config
    grace_s = options.extra.get("operator_job_grace_s", 0.0)
    checkpoint_dir = Path(options.extra.get("checkpoint_dir", "checkpoints")).resolve() / "operators"
    try:
        launch = job_launch(
            cfg,
            Path(cfg.store.store_dir).resolve(),
            checkpoint_dir,
            str(options.extra.get("operators_master", "local[2]")),
            inherited_token=os.environ.get(TOKEN_ENV),
            queries=options.extra.get("operator_queries"),
            grace_s=grace_s,
        )
    except InvalidArgument as exc:
        _refuse(str(exc))  # a long sentence: plain text, not typer's 80-column box
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    supervisor = OperatorSupervisor(
        launch.argv,
        log_path=checkpoint_dir / "operator-job.log",
        env=launch.environment(os.environ),
        lock_path=checkpoint_dir / LOCK_FILE,
        grace_s=grace_s,
    )

    def companion(broker: Any) -> Any:
        supervisor.should_run = lambda: broker.cluster is None or broker.cluster.serving
        return supervised(broker.operators, supervisor)

    return [companion]


def _grpc_companions(options: ServeOptions) -> list[Companion]:
    """The RocketMQ 5 gRPC door, when ``--grpc-port`` is given."""
    if options.extra.get("grpc_port") is None:
        return []
    try:
        from ingest_api.grpc.companion import serve_companions
    except ImportError as exc:
        raise typer.BadParameter(
            f"the gRPC door needs grpcio and protobuf ({exc.name} is missing): pip install 'sparkmq[grpc]'",
            param_hint="--grpc-port",
        ) from exc

    return list(serve_companions(options))


#: Factories of companions run with ``serve`` (each may return none).
SERVE_COMPANIONS: list[Callable[[ServeOptions], list[Companion]]] = [
    _kafka_companions,
    _remoting_companions,
    _grpc_companions,
    _operator_companions,
]


@app.command()
def serve(
    *,
    store_dir: Annotated[Path, typer.Option(help="Store directory (created if missing).")] = Path("data"),
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8080,
    auth_file: Annotated[
        Path | None,
        typer.Option(
            help="Users file (tokens, SASL passwords, rights; docs/security.md): every door then "
            "authenticates and authorizes; off when absent. Reloaded on SIGHUP and when it changes.",
            rich_help_panel="Security",
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None,
        typer.Option(help="PEM certificate: HTTP becomes HTTPS, Kafka SSL.", rich_help_panel="Security"),
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(help="PEM private key of --tls-cert.", rich_help_panel="Security")
    ] = None,
    tls_ca: Annotated[
        Path | None,
        typer.Option(help="PEM CA that client certificates must chain to.", rich_help_panel="Security"),
    ] = None,
    tls_require_client_cert: Annotated[
        bool,
        typer.Option(help="Refuse clients without a certificate from --tls-ca.", rich_help_panel="Security"),
    ] = False,
    allow_plaintext: Annotated[
        bool,
        typer.Option(
            help="With --auth-file, allow a listener without TLS on a non-loopback address.",
            rich_help_panel="Security",
        ),
    ] = False,
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
    remoting_port: Annotated[
        int | None,
        typer.Option(
            help="Also serve RocketMQ's remoting protocol on this port (RocketMQ: 10911; off when absent)."
        ),
    ] = None,
    remoting_host: Annotated[
        str | None, typer.Option(help="Remoting door bind address (default: --host).")
    ] = None,
    grpc_port: Annotated[
        int | None,
        typer.Option(
            help="Also serve RocketMQ 5's gRPC protocol (the official clients; RocketMQ's proxy uses "
            "8081) on this port, on --host, advertising --advertise-host (off when absent)."
        ),
    ] = None,
    operators: Annotated[
        str,
        typer.Option(help="local: run the stateful operators (delayed delivery) as a child Spark job; off."),
    ] = "local",
    operators_master: Annotated[
        str, typer.Option(help="Spark master of the local operator job.")
    ] = "local[2]",
    operator_queries: Annotated[
        str,
        typer.Option(
            help="The resolvers the local operator job runs, comma-separated: delay (delay levels and "
            "timers, and the retry ladder's retries), transactions (check-backs), retry (send-backs; "
            "needs delay). Each idle resolver costs a share of a core: leave out what no client uses."
        ),
    ] = "delay,transactions,retry",
    operator_job_grace: Annotated[
        str,
        typer.Option(
            help="How long the local operator job outlives a crashed broker, waiting for it (e.g. 60s): "
            "the restarted broker adopts it, and overdue messages go out a trigger after its start, "
            "without a new Spark job's start. 0: the job dies with the broker."
        ),
    ] = DEFAULT_OPERATOR_JOB_GRACE,
    checkpoint_dir: Annotated[
        Path, typer.Option(help="Root of the operator job's Spark checkpoints.")
    ] = Path("checkpoints"),
    delay_levels: Annotated[
        str, typer.Option(help="Delay level table (RocketMQ messageDelayLevel), level 1 first.")
    ] = DEFAULT_DELAY_LEVELS,
    timer_max_delay: Annotated[
        str, typer.Option(help="Furthest a timer message may be scheduled (RocketMQ: 3d); e.g. 30d, 3650d.")
    ] = "3d",
    timer_roll_window: Annotated[
        str,
        typer.Option(
            help="Timer messages due further out are re-parked (rolled) when the window has passed, "
            "so none outlives CommitLog retention (keep it well under the 72 h retention)."
        ),
    ] = "1d",
    wheel_lookahead: Annotated[
        str,
        typer.Option(
            help="How far ahead the delay resolver decides; the broker's wheel delivers each "
            "message at its due time (cover a trigger plus a micro-batch or two; 0 = no wheel)."
        ),
    ] = "10s",
    tx_immunity_ms: Annotated[
        int,
        typer.Option(
            help="No transaction check-back before a half is this old (RocketMQ transactionTimeOut)."
        ),
    ] = 6000,
    tx_check_interval_ms: Annotated[
        int, typer.Option(help="Between two check-backs of one transaction (transactionCheckInterval).")
    ] = 30_000,
    tx_check_max: Annotated[
        int,
        typer.Option(
            help="Check-backs before a half goes to TRANS_CHECK_MAX_TIME_TOPIC (transactionCheckMax)."
        ),
    ] = 15,
    cluster: Annotated[
        str | None,
        typer.Option(
            # Help texts are rich markup: "\\[" is a literal "[" ("[/chroot]" alone is a closing tag).
            help="Join a cluster: zk://HOST:PORT[,HOST:PORT]\\[/chroot] (ZooKeeper); off when absent.",
            rich_help_panel="Cluster",
        ),
    ] = None,
    broker_name: Annotated[
        str | None,
        typer.Option(help="This broker's name in the cluster (needs --cluster).", rich_help_panel="Cluster"),
    ] = None,
    advertise_host: Annotated[
        str | None,
        typer.Option(
            help="Host other brokers and clients use to reach this one (default: --host, or 127.0.0.1 "
            "when --host is a wildcard).",
            rich_help_panel="Cluster",
        ),
    ] = None,
    ha_port: Annotated[
        int | None,
        typer.Option(
            help="Replication listener: brokers with the same --broker-name and an --ha-port form a "
            "replica group (a master elected through ZooKeeper, slaves replicating its CommitLog).",
            rich_help_panel="Replication",
        ),
    ] = None,
    ha_advertise: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT slaves connect to for replication (default: --advertise-host and --ha-port), "
            "e.g. a forwarded port or a proxy in front of --ha-port.",
            rich_help_panel="Replication",
        ),
    ] = None,
    replication: Annotated[
        str,
        typer.Option(
            help="async: a produce is answered once the master has it; sync: once every in-sync member does.",
            rich_help_panel="Replication",
        ),
    ] = "async",
    min_insync: Annotated[
        int,
        typer.Option(
            help="Refuse writes while fewer members are in sync (the master counts).",
            rich_help_panel="Replication",
        ),
    ] = 1,
    replication_timeout_ms: Annotated[
        int,
        typer.Option(help="A sync produce's wait for the in-sync set.", rich_help_panel="Replication"),
    ] = 3000,
    max_time_slave_not_catchup_ms: Annotated[
        int,
        typer.Option(
            help="A slave that has not caught up for this long leaves the in-sync set (RocketMQ "
            "haMaxTimeSlaveNotCatchup); with sync, produces time out until then.",
            rich_help_panel="Replication",
        ),
    ] = 15_000,
    unclean_failover: Annotated[
        bool,
        typer.Option(
            help="Elect an out-of-sync member when no in-sync one is alive (loses what only the master had).",
            rich_help_panel="Replication",
        ),
    ] = False,
    session_timeout_ms: Annotated[
        int,
        typer.Option(
            help="ZooKeeper session timeout: a killed broker is seen dead (queues unavailable) after it.",
            rich_help_panel="Cluster",
        ),
    ] = 6000,
    peer_credential: sec.PeerCredentialOption = None,
    peer_credential_file: sec.PeerCredentialFileOption = None,
    peer_tls_ca: sec.PeerTlsCaOption = None,
    zk_auth_file: sec.ZkAuthFileOption = None,
    zk_auth: sec.ZkAuthEnvOption = None,
    ha_tls_cert: sec.HaTlsCertOption = None,
    ha_tls_key: sec.HaTlsKeyOption = None,
    ha_tls_ca: sec.HaTlsCaOption = None,
) -> None:
    """Run the broker: open the store and serve the HTTP API until SIGTERM or Ctrl-C."""
    membership = _cluster_config(
        cluster,
        broker_name,
        advertise_host,
        host,
        port,
        kafka_port,
        session_timeout_ms,
        default_queues,
        auto_create_topics,
    )
    if membership is not None and remoting_port is not None:  # published for the NameServer routes
        membership = membership.with_changes(remoting_port=remoting_port)
    if membership is not None and ha_port is not None:
        membership = _with_replication(
            membership,
            ha_port,
            replication=replication,
            min_insync=min_insync,
            replication_timeout_ms=replication_timeout_ms,
            max_time_slave_not_catchup_ms=max_time_slave_not_catchup_ms,
            unclean_failover=unclean_failover,
        )
        if ha_advertise is not None:
            membership = _with_ha_advertise(membership, ha_advertise)
    elif ha_port is not None or replication != "async" or min_insync != 1 or unclean_failover:
        _refuse(
            "--ha-port, --replication, --min-insync and --unclean-failover need --cluster and --broker-name"
        )
    elif max_time_slave_not_catchup_ms != 15_000:
        _refuse("--max-time-slave-not-catchup-ms needs --ha-port, --cluster and --broker-name")
    elif ha_advertise is not None:
        _refuse("--ha-advertise needs --ha-port, --cluster and --broker-name")
    security = sec.ClusterSecurityFlags(
        peer_credential,
        peer_credential_file,
        peer_tls_ca,
        zk_auth_file,
        ha_tls_cert,
        ha_tls_key,
        ha_tls_ca,
        zk_auth,
    )
    try:
        membership = security.membership(membership)
        credential = security.credential()
    except InvalidArgument as exc:
        _refuse(str(exc))
    from streaming.operators.names import parse_queries

    try:
        queries = parse_queries(operator_queries)
    except ValueError as exc:
        typer.echo(f"sparkmq serve: --operator-queries: {exc}", err=True)
        raise typer.Exit(2) from None
    grace_s = _grace_s(operator_job_grace)
    store_dir.mkdir(parents=True, exist_ok=True)
    try:
        store_config = StoreConfig(
            store_dir=store_dir,
            delay_levels=delay_levels,
            timer_max_delay_ms=parse_duration_ms(timer_max_delay),
            flush_disk_type=FlushDiskType.SYNC_FLUSH
            if flush is FlushMode.sync
            else FlushDiskType.ASYNC_FLUSH,
            # In a cluster topics are created through ZooKeeper, never by the store alone.
            auto_create_topics=auto_create_topics and membership is None,
            default_queues_per_topic=default_queues,
            replicated=membership is not None and membership.replicated,
            **_store_address(membership),
        ).validate()
        config = ServerConfig(
            store=store_config,
            host=host,
            port=port,
            auth_file=auth_file,
            tls=_tls_config(tls_cert, tls_key, tls_ca, tls_require_client_cert),
            allow_plaintext=allow_plaintext,
            max_batch_messages=max_batch,
            max_request_bytes=max_request_mib << 20,
            log_level=log_level,
            access_log=access_log,
            timer_roll_window_ms=parse_duration_ms(timer_roll_window),
            wheel_lookahead_ms=_duration_ms_or_zero(wheel_lookahead),
            tx_immunity_ms=tx_immunity_ms,
            tx_check_interval_ms=tx_check_interval_ms,
            tx_check_max=tx_check_max,
            relocation_fault=os.environ.get("SPARKMQ_TEST_RELOCATION_FAULT"),
            sink_fault=os.environ.get("SPARKMQ_TEST_SINK_FAULT"),
            relocation_chunk_rows=int(os.environ.get("SPARKMQ_TEST_RELOCATION_CHUNK_ROWS", "65536")),
            cluster=membership,
            peer_credential=credential,
            peer_tls_ca=peer_tls_ca,
        ).validate()
        for door_port, door_host, door in (
            (kafka_port, kafka_host, "Kafka"),
            (remoting_port, remoting_host, "remoting"),
            (grpc_port, None, "gRPC"),
        ):
            if door_port is not None:
                config.check_plaintext(door_host or host, door)
    except InvalidArgument as exc:
        typer.echo(f"sparkmq serve: {exc}", err=True)
        raise typer.Exit(2) from None
    if operators not in ("local", "off"):
        typer.echo(f"sparkmq serve: --operators must be local or off, got {operators!r}", err=True)
        raise typer.Exit(2)
    extra = {
        "operators": operators,
        "operators_master": operators_master,
        "operator_queries": queries,
        "operator_job_grace_s": grace_s,
        "checkpoint_dir": str(checkpoint_dir),
        "kafka_port": kafka_port,
        "kafka_host": kafka_host,
        "kafka_advertised_host": kafka_advertised_host,
        "remoting_port": remoting_port,
        "remoting_host": remoting_host,
        "grpc_port": grpc_port,
        "advertise_host": advertise_host,
    }
    options = ServeOptions(
        config=config, extra={name: value for name, value in extra.items() if value is not None}
    )
    companions = [companion for factory in SERVE_COMPANIONS for companion in factory(options)]
    if not run_server(config, companions):
        typer.echo("sparkmq serve: the broker failed to start (see the log above)", err=True)
        raise typer.Exit(1)


def _tls_config(cert: Path | None, key: Path | None, ca: Path | None, require: bool) -> TlsConfig | None:
    """The listeners' TLS; exits 2 unless --tls-cert and --tls-key come together."""
    if cert is None and key is None:
        if ca is not None or require:
            _refuse("--tls-ca and --tls-require-client-cert need --tls-cert and --tls-key")
        return None
    if cert is None or key is None:
        _refuse("--tls-cert and --tls-key go together")
    return TlsConfig(cert, key, ca, require)


def _cluster_config(
    cluster: str | None,
    broker_name: str | None,
    advertise_host: str | None,
    host: str,
    port: int,
    kafka_port: int | None,
    session_timeout_ms: int,
    default_queues: int,
    auto_create_topics: bool,
) -> ClusterConfig | None:
    """The membership the cluster flags ask for; exits 2 with what is wrong."""
    if cluster is None:
        if broker_name is not None:
            _refuse("--broker-name needs --cluster zk://HOST:PORT[/chroot]")
        return None
    if broker_name is None:
        _refuse("--cluster needs --broker-name NAME (this broker's name in the cluster)")
    advertised = advertise_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
    try:
        return ClusterConfig(
            address=parse_cluster_address(cluster),
            broker_name=str(broker_name),
            advertise_host=advertised,
            http_port=port,
            kafka_port=kafka_port,
            session_timeout_ms=session_timeout_ms,
            default_queues=default_queues,
            auto_create_topics=auto_create_topics,
        ).validate()
    except (InvalidClusterAddress, InvalidBrokerName, InvalidArgument) as exc:
        _refuse(str(exc))
    raise AssertionError("unreachable")


def _with_replication(membership: ClusterConfig, ha_port: int, **settings: object) -> ClusterConfig:
    """``settings``: the replication options, named as :class:`ClusterConfig`'s fields."""
    try:
        return membership.with_changes(ha_port=ha_port, **settings)
    except InvalidArgument as exc:
        _refuse(str(exc))


def _with_ha_advertise(membership: ClusterConfig, address: str) -> ClusterConfig:
    try:
        return membership.with_changes(ha_advertise=address)
    except InvalidArgument as exc:
        _refuse(str(exc))


def _store_address(membership: ClusterConfig | None) -> dict[str, Any]:
    """In a cluster, msg ids name the broker that stored the message: its address and HTTP port."""
    if membership is None:
        return {}
    try:
        ipaddress.IPv4Address(membership.advertise_host)
    except ValueError:
        return {"store_port": membership.http_port}
    return {"store_host": membership.advertise_host, "store_port": membership.http_port}


def _duration_ms_or_zero(text: str) -> int:
    """A duration flag that also takes a bare ``0`` (off), which :func:`parse_duration_ms` refuses
    for want of a unit."""
    return 0 if text.strip() == "0" else parse_duration_ms(text)


def _grace_s(text: str) -> float:
    """``--operator-job-grace`` in seconds (``0``: none); exit 2 naming a bad value."""
    try:
        return _duration_ms_or_zero(text) / 1000
    except InvalidArgument as exc:
        typer.echo(f"sparkmq serve: --operator-job-grace: {exc}", err=True)
        raise typer.Exit(2) from None


def _refuse(message: str) -> NoReturn:
    typer.echo(f"sparkmq serve: {message}", err=True)
    raise typer.Exit(2)


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
