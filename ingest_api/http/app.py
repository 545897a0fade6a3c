"""The HTTP door's app factory: ``create_app(config)`` returns an app whose lifespan runs the
broker (:func:`broker.lifecycle.running_broker`: opens the store, serves, closes it; a clean stop
removes the store's ``abort`` file).

Companions are async context managers entered after the store opens and exited before it
closes, on the same event loop; the Kafka gateway plugs in this way (``sparkmq serve
--kafka-port`` does it for you)::

    create_app(config, companions=[KafkaCompanion(port=9092)])   # ingest_api.kafka.companion
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

import sparkmq
from broker.config import ServerConfig
from broker.lifecycle import Companion, StoreOpener, running_broker
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
    pop,
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
from store import MessageStore, StoreConfig


def _lifespan(
    config: ServerConfig, companions: Sequence[Companion], open_store: StoreOpener
) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with running_broker(config, companions, open_store) as broker:
            app.state.broker = broker
            yield

    return lifespan


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


#: Adds another web door's routes to the app (the console's ``install_console``).
Mount = Callable[[FastAPI], None]


def create_app(
    config: ServerConfig | StoreConfig,
    companions: Sequence[Companion] = (),
    open_store: StoreOpener = MessageStore.open,
    mounts: Sequence[Mount] = (),
) -> FastAPI:
    """The HTTP door for ``config`` (a bare :class:`StoreConfig` gets default server settings),
    with ``mounts`` (other web doors sharing its port) added in front of its timing middleware."""
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
        pop,
        kafka_peers,
        sinks,
        operators,
        transactions,
        stats,
        ops,
    ):
        app.include_router(module.router)
    app.include_router(replica_router)
    for mount in mounts:
        mount(app)
    app.add_middleware(RequestTiming)  # outermost: times everything, fast lane included
    app.add_api_route("/", _to_console, include_in_schema=False)
    app.openapi = _openapi(app, server_config)  # type: ignore[method-assign]
    return app
