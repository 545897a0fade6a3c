"""The web port: the HTTP door and the console on one address, over one running broker.

The two web doors share a port, so something above both puts them together; neither imports the
other. :func:`create_app` is the HTTP door's app (:func:`ingest_api.http.app.create_app`) with
the console mounted and the console's chart sampler as the first companion::

    create_app(config, companions=[KafkaCompanion(port=9092)])   # ingest_api.kafka.companion
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from fastapi import FastAPI

from broker.config import ServerConfig
from broker.lifecycle import Companion, StoreOpener
from broker.state import Broker
from ingest_api.console import install_console
from ingest_api.console.samples import sampling
from ingest_api.http import app as http_app
from store import MessageStore, StoreConfig

__all__ = ["Companion", "StoreOpener", "create_app"]


def create_app(
    config: ServerConfig | StoreConfig,
    companions: Sequence[Companion] = (),
    open_store: StoreOpener = MessageStore.open,
) -> FastAPI:
    """The broker's web app for ``config``: the HTTP API, the console, their shared lifespan."""
    server_config = config if isinstance(config, ServerConfig) else ServerConfig(store=config)
    interval_s = server_config.console_sample_interval_s

    def console_sampler(broker: Broker) -> AbstractAsyncContextManager[Any]:
        return sampling(broker, interval_s)

    return http_app.create_app(
        server_config, [console_sampler, *companions], open_store, mounts=[install_console]
    )
