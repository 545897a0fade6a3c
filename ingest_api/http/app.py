"""The FastAPI app factory: ``create_app(config)`` returns an app whose lifespan opens the
store and closes it (a clean stop removes the store's ``abort`` file).

Companions are async context managers entered after the store opens and exited before it
closes, on the same event loop; the Kafka gateway plugs in this way (``sparkmq serve
--kafka-port`` does it for you)::

    create_app(config, companions=[KafkaCompanion(port=9092)])   # ingest_api.kafka.companion
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

import sparkmq
from broker.auth import load_token_table
from broker.coalescer import ProduceCoalescer
from broker.config import ServerConfig
from broker.longpoll import ArrivalHub
from broker.membership import cluster_membership
from broker.metrics import BrokerMetrics
from broker.operators import OperatorBoard
from broker.retries import GroupConfigs
from broker.sinks import sink_recovery
from broker.state import Broker
from broker.threads import run_blocking
from broker.transactions import TransactionBoard
from ingest_api.console import install_console
from ingest_api.console.samples import sampling
from ingest_api.http import fastlane
from ingest_api.http.errors import install_error_handlers
from ingest_api.http.limits import RequestSizeLimit
from ingest_api.http.openapi import openapi_document
from ingest_api.http.routers import (
    cluster,
    groups,
    kafka_peers,
    messages,
    operators,
    ops,
    queues,
    retries,
    sinks,
    stats,
    topics,
    transactions,
)
from ingest_api.http.routers.replica import router as replica_router
from ingest_api.http.schemas import ProduceBatchIn
from ingest_api.http.timing import RequestTiming
from store import MessageStore, StoreConfig, parse_delay_levels

#: Something run alongside the HTTP API for the broker's lifetime (e.g. a Kafka gateway).
Companion = Callable[[Broker], AbstractAsyncContextManager[Any]]
#: How the lifespan opens the store (tests pass one with a fault-injecting file system).
StoreOpener = Callable[[StoreConfig], MessageStore]


def _lifespan(
    config: ServerConfig, companions: Sequence[Companion], open_store: StoreOpener
) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tokens = load_token_table(config.auth_file) if config.auth_file is not None else None
        store = await run_blocking(open_store, config.store)
        try:
            hub = ArrivalHub(asyncio.get_running_loop())
            store.add_arrival_listener(hub.on_arrival)
            board = OperatorBoard(
                store,
                operator_settings(config),
                chunk_rows=config.relocation_chunk_rows,
                fault=config.relocation_fault,
            )
            board.transactions = await run_blocking(TransactionBoard.open, store)
            board.group_configs = GroupConfigs(store.config.store_dir / "config")
            broker = Broker(
                config=config,
                store=store,
                hub=hub,
                metrics=BrokerMetrics(),
                producer=ProduceCoalescer(store),
                tokens=tokens,
                operators=board,
            )
            app.state.broker = broker
            try:
                async with AsyncExitStack() as stack:
                    # Joined first, left last: the broker is a member exactly while it serves.
                    await stack.enter_async_context(cluster_membership(broker))
                    # Sink batches decided before the last stop are published before serving.
                    await stack.enter_async_context(sink_recovery(broker))
                    # So are relocation batches of the operators (delayed messages).
                    await run_blocking(board.relocations.recover)
                    await stack.enter_async_context(sampling(broker, config.console_sample_interval_s))
                    for companion in companions:
                        await stack.enter_async_context(companion(broker))
                    yield
            finally:
                await board.transactions.dispatcher.close()
                hub.close()
                store.remove_arrival_listener(hub.on_arrival)
        finally:
            await run_blocking(store.close)

    return lifespan


def operator_settings(config: ServerConfig) -> dict[str, Any]:
    """What the resolver job needs to compute due times, from this broker's configuration."""
    return {
        "delay_levels_ms": list(parse_delay_levels(config.store.delay_levels)),
        "timer_precision_ms": config.store.timer_precision_ms,
        "timer_roll_window_ms": config.timer_roll_window_ms,
        "burst_cap": config.operator_burst_cap,
        "tx_immunity_ms": config.tx_immunity_ms,
        "tx_check_interval_ms": config.tx_check_interval_ms,
        "tx_check_max": config.tx_check_max,
        "file_reserved_ms": int(config.store.file_reserved_time_hours * 3_600_000),
    }


#: Bodies routes read by hand (their schemas are referenced from ``openapi_extra``).
_HAND_READ_BODIES = (ProduceBatchIn,)


def _openapi(app: FastAPI, config: ServerConfig) -> Callable[..., dict[str, Any]]:
    """``app.openapi``: the document for this broker's configuration, built once per variant
    (``internal=True`` keeps the operations the operator job and the Spark sink call)."""
    built: dict[bool, dict[str, Any]] = {}

    def openapi(internal: bool = False) -> dict[str, Any]:
        if internal not in built:
            built[internal] = openapi_document(app, config, internal=internal, body_models=_HAND_READ_BODIES)
        return built[internal]

    return openapi


def broker_openapi(
    config: ServerConfig, *, auth_required: bool | None = None, internal: bool = False
) -> dict[str, Any]:
    """The document a broker serves with ``config``, without starting one (``sparkmq openapi``).
    ``auth_required`` stands for ``--auth-file`` (default: whether ``config`` names one)."""
    app = create_app(config)
    return openapi_document(
        app, config, auth_required=auth_required, internal=internal, body_models=_HAND_READ_BODIES
    )


async def _to_console() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


def create_app(
    config: ServerConfig | StoreConfig,
    companions: Sequence[Companion] = (),
    open_store: StoreOpener = MessageStore.open,
) -> FastAPI:
    """A broker app for ``config`` (a bare :class:`StoreConfig` gets default server settings)."""
    server_config = config if isinstance(config, ServerConfig) else ServerConfig(store=config)
    server_config.validate()
    app = FastAPI(
        title="sparkmq",
        version=sparkmq.__version__,
        description="RocketMQ-compatible message queue: HTTP ingest, pull and admin API.",
        lifespan=_lifespan(server_config, companions, open_store),
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    if server_config.fast_lane:  # in front of every middleware below (it does their part itself)
        fastlane.install(app, server_config.max_request_bytes)
    app.add_middleware(RequestSizeLimit, max_bytes=server_config.max_request_bytes)
    for module in (
        cluster,
        topics,
        messages,
        queues,
        retries,
        groups,
        kafka_peers,
        sinks,
        operators,
        transactions,
        stats,
        ops,
    ):
        app.include_router(module.router)
    app.include_router(replica_router)
    install_console(app)
    app.add_middleware(RequestTiming)  # outermost: times everything, fast lane included
    app.add_api_route("/", _to_console, include_in_schema=False)
    app.openapi = _openapi(app, server_config)  # type: ignore[method-assign]
    return app
