"""``python -m ingest_api.remoting --store-dir DIR``: serve one store over RocketMQ's remoting
protocol only (name-server and broker codes on one port), as a companion of a broker that runs
without its HTTP door."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from broker.config import ServerConfig
from broker.lifecycle import running_broker
from ingest_api.remoting.companion import RemotingCompanion
from store import StoreConfig


def main(argv: list[str] | None = None) -> None:
    """Serve one store directory over the remoting protocol (no HTTP)."""
    parser = argparse.ArgumentParser(description="sparkmq RocketMQ remoting door (standalone)")
    parser.add_argument("--store-dir", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=10911)
    parser.add_argument("--advertised-host", default=None)
    parser.add_argument("--broker-name", default="broker-a")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = ServerConfig(store=StoreConfig(store_dir=args.store_dir).validate()).validate()
    door = RemotingCompanion(args.port, args.host, args.advertised_host, args.broker_name)

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with running_broker(config, companions=[door]):
            await stop.wait()  # SIGINT / SIGTERM: the door closes, then the broker stops

    asyncio.run(serve())


if __name__ == "__main__":
    main()
