"""The objects one running HTTP broker shares between its requests (``app.state.broker``)."""

from __future__ import annotations

from dataclasses import dataclass

from ingest_api.auth import TokenTable
from ingest_api.coalescer import ProduceCoalescer
from ingest_api.config import ServerConfig
from ingest_api.longpoll import ArrivalHub
from ingest_api.metrics import BrokerMetrics
from store.message_store import MessageStore


@dataclass
class Broker:
    """Opened by the app's lifespan; companions (e.g. a Kafka gateway) receive it too."""

    config: ServerConfig
    store: MessageStore
    hub: ArrivalHub
    metrics: BrokerMetrics
    #: Group commit of single-message produces.
    producer: ProduceCoalescer
    #: ``None`` when auth is off.
    tokens: TokenTable | None
