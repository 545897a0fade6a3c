"""Kafka wire-protocol gateway: unmodified Kafka clients produce to and consume from sparkmq.

See docs/kafka_gateway.md. Entry point: :func:`start_kafka_gateway` (inside a running loop).
"""

from __future__ import annotations

from ingest_api.kafka.context import GatewayConfig
from ingest_api.kafka.server import GatewayThread, KafkaGateway, start_kafka_gateway

__all__ = ["GatewayConfig", "GatewayThread", "KafkaGateway", "start_kafka_gateway"]
