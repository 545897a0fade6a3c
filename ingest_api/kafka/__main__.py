"""``python -m ingest_api.kafka --store-dir DIR``: serve one store over the Kafka protocol only."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from dataclasses import replace
from pathlib import Path

from ingest_api.kafka.context import GatewayConfig
from ingest_api.kafka.server import start_kafka_gateway
from store import MessageStore, StoreConfig


def main(argv: list[str] | None = None) -> None:
    """Serve one store directory over the Kafka protocol only (no HTTP)."""
    parser = argparse.ArgumentParser(description="sparkmq Kafka gateway (standalone)")
    parser.add_argument("--store-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--advertised-host", default=None)
    parser.add_argument(
        "--initial-rebalance-delay-ms", type=int, default=GatewayConfig.initial_rebalance_delay_ms
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = replace(
        GatewayConfig(),
        host=args.host,
        port=args.port,
        advertised_host=args.advertised_host,
        initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
    ).validate()

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        with MessageStore.open(StoreConfig(store_dir=args.store_dir).validate()) as store:
            gateway = await start_kafka_gateway(store, config=config)
            try:
                await stop.wait()  # SIGINT / SIGTERM: close the gateway, then the store, cleanly
            finally:
                await gateway.close()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
