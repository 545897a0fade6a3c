"""The broker's lifecycle: open the store, assemble the services, join the cluster, recover, serve.

:func:`running_broker` is the one start-up and shut-down sequence every way of running a broker
goes through (``sparkmq serve``, the tests' servers, the benchmarks). A door attaches to the
running broker as a *companion*: an async context manager entered after the store opens and the
broker has joined its cluster, and exited before the store closes, on the same event loop. The
Kafka gateway and the console's sampler are companions; the HTTP door holds the broker in its
app's lifespan.

Order (each undone in reverse at shut-down):

1. the store is opened (recovery runs here) and the users file read;
2. the arrival hub, the operator board, the transaction board, the group settings and the POP
   service (one per store: every door shares it) are built into one :class:`broker.state.Broker`;
3. the broker joins its cluster (a member exactly while it serves);
4. sink batches, then operator relocations, decided before the last stop are published, and
   the delay wheel starts (it replays the decisions it had not published);
5. the companions start, in the order given.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any

from broker.auth import DoorAuth
from broker.auth_reload import auth_reloading
from broker.coalescer import ProduceCoalescer
from broker.config import ServerConfig
from broker.longpoll import ArrivalHub
from broker.membership import cluster_membership
from broker.metrics import BrokerMetrics
from broker.operators import OperatorBoard
from broker.peer_identity import check_peer_credential
from broker.pop import PopService
from broker.retries import GroupConfigs
from broker.sinks import sink_recovery
from broker.state import Broker
from broker.threads import run_blocking
from broker.transactions import TransactionBoard
from broker.wheel import wheel_service
from store import MessageStore, StoreConfig, parse_delay_levels

#: The broker's secret for unknown SCRAM users' mock salts, in the store's config dir.
AUTH_SECRET_FILE = "auth-secret"
#: Something run alongside the broker for its lifetime (e.g. a Kafka gateway).
Companion = Callable[[Broker], AbstractAsyncContextManager[Any]]
#: How the broker opens its store (tests pass one with a fault-injecting file system).
StoreOpener = Callable[[StoreConfig], MessageStore]


@asynccontextmanager
async def running_broker(
    config: ServerConfig, companions: Sequence[Companion] = (), open_store: StoreOpener = MessageStore.open
) -> AsyncIterator[Broker]:
    """The broker of ``config``, serving until the block exits (see the module docstring)."""
    store = await run_blocking(open_store, config.store)
    try:
        auth = await run_blocking(open_auth, config)
        hub = ArrivalHub(asyncio.get_running_loop())
        store.add_arrival_listener(hub.on_arrival)
        board = OperatorBoard(
            store,
            operator_settings(config),
            chunk_rows=config.relocation_chunk_rows,
            fault=config.relocation_fault,
            wheel_lookahead_ms=config.wheel_lookahead_ms,
        )
        board.transactions = await run_blocking(TransactionBoard.open, store)
        board.group_configs = GroupConfigs(store.config.store_dir / "config")
        broker = Broker(
            config=config,
            store=store,
            hub=hub,
            metrics=BrokerMetrics(),
            producer=ProduceCoalescer(store),
            auth=auth,
            operators=board,
            pop=await run_blocking(PopService, store),
        )
        try:
            async with AsyncExitStack() as stack:
                # Joined first, left last: the broker is a member exactly while it serves.
                await stack.enter_async_context(cluster_membership(broker))
                # The users file is re-read on SIGHUP and when it changes.
                await stack.enter_async_context(auth_reloading(auth))
                # Sink batches decided before the last stop are published before serving.
                await stack.enter_async_context(sink_recovery(broker))
                # So are relocation batches of the operators (delayed messages).
                await run_blocking(board.relocations.recover)
                # The delay wheel (while this broker serves): decisions due later, at their time.
                await stack.enter_async_context(wheel_service(broker))
                for companion in companions:
                    await stack.enter_async_context(companion(broker))
                yield broker
        finally:
            await run_blocking(broker.pop.close)
            await board.transactions.dispatcher.close()
            hub.close()
            store.remove_arrival_listener(hub.on_arrival)
    finally:
        await run_blocking(store.close)


def open_auth(config: ServerConfig) -> DoorAuth | None:
    """The users of ``--auth-file`` and the mock-salt secret kept in the store's config dir
    (``None`` when auth is off); refuses a peer credential the file does not hold as a broker
    (:class:`store.InvalidArgument`: every peer would refuse this broker)."""
    if config.auth_file is None:
        return None
    auth = DoorAuth.open(config.auth_file, config.store.store_dir / "config" / AUTH_SECRET_FILE)
    if config.peer_credential is not None:
        check_peer_credential(auth.table, config.peer_credential)
    return auth


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
