"""The objects one running HTTP broker shares between its requests (``app.state.broker``)."""

from __future__ import annotations

from dataclasses import dataclass

from ingest_api.http.auth import TokenTable
from ingest_api.http.coalescer import ProduceCoalescer
from ingest_api.http.config import ServerConfig
from ingest_api.http.longpoll import ArrivalHub
from ingest_api.http.metrics import BrokerMetrics
from ingest_api.http.operators import OperatorBoard
from store import MessageStore


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
    #: Relocation publishing and the status of the stateful operators.
    operators: OperatorBoard | None = None
