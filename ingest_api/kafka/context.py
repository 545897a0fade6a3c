"""Shared state of one running gateway: configuration, store, coordinators, producer state.

Everything here lives on the gateway's event loop except the store, whose blocking calls go
through :meth:`GatewayContext.run_blocking` (a thread pool owned by the gateway), so one slow
read or fsync never stalls the other connections.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast

from ingest_api.kafka.cluster_link import ClusterLink
from ingest_api.kafka.coordinator import CoordinatorConfig, GroupCoordinator
from ingest_api.kafka.framing import MAX_REQUEST_BYTES
from ingest_api.kafka.names import KafkaNamedStore
from ingest_api.kafka.producer_state import PRODUCER_ID_BLOCK_BITS, ProducerIdAllocator, ProducerStateTable
from ingest_api.kafka.store_port import KafkaStore
from ingest_api.kafka.txn_coordinator import TxnConfig, TxnCoordinator
from ingest_api.kafka.txn_ledger import TxnLedger
from ingest_api.kafka.txn_log import TxnStateLog, TxnStateStore
from ingest_api.kafka.txn_participants import TxnParticipants
from ingest_api.kafka.txn_record import TxnTables
from ingest_api.kafka.txn_state import TransactionalIds
from store import InvalidArgument
from store.publish import TransactionService

T = TypeVar("T")
PartitionRef = tuple[str, int]


@dataclass(frozen=True)
class GatewayConfig:
    """Gateway settings; ``validate()`` refuses contradictions."""

    host: str = "127.0.0.1"
    #: 0 picks a free port (tests); the bound port is ``KafkaGateway.port``.
    port: int = 9092
    #: Host/port put in Metadata and FindCoordinator answers (defaults: host/bound port).
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_id: int = 0
    cluster_id: str = "sparkmq"
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    #: How often session expiry and rebalance deadlines are checked.
    coordinator_tick_ms: int = 100
    executor_workers: int = 8
    max_request_bytes: int = MAX_REQUEST_BYTES
    #: Upper bound on a Fetch's long-poll, whatever the client asks.
    max_fetch_wait_ms: int = 30_000
    #: Kafka ``transaction.max.timeout.ms``: a larger ``transaction.timeout.ms`` is refused.
    max_transaction_timeout_ms: int = 900_000
    #: KIP-368 ``connections.max.reauth.ms``: a SASL login lasts this long (0: forever); the
    #: client re-authenticates on the live connection, or it is closed.
    sasl_session_lifetime_ms: int = 3_600_000
    #: Kafka ``connection.failed.authentication.delay.ms``: a failed login is answered this late.
    failed_auth_delay_ms: int = 100

    def validate(self) -> GatewayConfig:
        checks = [
            (0 <= self.port < 65536, "port must be in [0, 65536)"),
            (
                self.advertised_port is None or 0 < self.advertised_port < 65536,
                "advertised_port out of range",
            ),
            (self.node_id >= 0, "node_id must be >= 0"),
            (self.initial_rebalance_delay_ms >= 0, "initial_rebalance_delay_ms must be >= 0"),
            (
                0 < self.min_session_timeout_ms <= self.max_session_timeout_ms,
                "need 0 < min_session_timeout_ms <= max_session_timeout_ms",
            ),
            (self.coordinator_tick_ms > 0, "coordinator_tick_ms must be > 0"),
            (self.executor_workers > 0, "executor_workers must be > 0"),
            (self.max_request_bytes >= 1024, "max_request_bytes must be >= 1024"),
            (self.max_fetch_wait_ms >= 0, "max_fetch_wait_ms must be >= 0"),
            (self.max_transaction_timeout_ms > 0, "max_transaction_timeout_ms must be > 0"),
            (self.sasl_session_lifetime_ms >= 0, "sasl_session_lifetime_ms must be >= 0"),
            (0 <= self.failed_auth_delay_ms <= 10_000, "failed_auth_delay_ms must be in [0, 10000]"),
        ]
        for ok, message in checks:
            if not ok:
                raise InvalidArgument(f"invalid GatewayConfig: {message}")
        return self


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ArrivalNotifier:
    """Wakes long-polling Fetches when the store dispatches new messages.

    ``on_arrival`` is the store's arrival listener: it runs on a store thread and hops to the
    loop with ``call_soon_threadsafe``. Waiters register one :class:`asyncio.Event` under
    every partition they read *before* re-checking the store, so no arrival is missed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiters: dict[PartitionRef, set[asyncio.Event]] = {}
        self.closed = False

    def on_arrival(self, topic: str, queue_id: int, max_offset: int) -> None:
        if self.closed or (topic, queue_id) not in self._waiters:
            return
        try:
            self._loop.call_soon_threadsafe(self._wake, (topic, queue_id))
        except RuntimeError:  # loop already closed during shutdown
            self.closed = True

    def _wake(self, ref: PartitionRef) -> None:
        for event in self._waiters.get(ref, ()):
            event.set()

    @contextmanager
    def watch(self, refs: list[PartitionRef]) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        for ref in refs:
            self._waiters.setdefault(ref, set()).add(event)
        try:
            yield event
        finally:
            for ref in refs:
                waiters = self._waiters.get(ref)
                if waiters is not None:
                    waiters.discard(event)
                    if not waiters:
                        del self._waiters[ref]


class DoorMetrics(Protocol):
    """Where the gateway counts its traffic (the broker's ``BrokerMetrics`` when embedded)."""

    def produced(
        self, topic: str, messages: int, body_bytes: int, kind: str, seconds: float, door: str
    ) -> None: ...
    def consumed(self, topic: str, messages: int, body_bytes: int, door: str) -> None: ...
    def kafka_request(self, api: str, seconds: float) -> None: ...


@dataclass
class GatewayContext:
    #: The broker's store seen through Kafka names (:mod:`ingest_api.kafka.names`).
    store: KafkaStore
    config: GatewayConfig
    loop: asyncio.AbstractEventLoop
    executor: ThreadPoolExecutor
    coordinator: GroupCoordinator
    producer_ids: ProducerIdAllocator
    #: The store's one transaction service (shared with the HTTP door when embedded).
    transactions: TransactionService
    #: Transactional ids: state machine, and the durable ids (records of the state topic).
    txn: TxnCoordinator
    transactional_ids: TransactionalIds
    #: The coordinator's state topic (``rmq_sys_KAFKA_TXN_STATE``), replayed at start and on
    #: a replica group's promotion (:meth:`with_txn_tables`).
    txn_log: TxnStateLog
    producers: ProducerStateTable = field(default_factory=ProducerStateTable)
    #: Serialises idempotent appends per producer id (check + append + record).
    producer_locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    #: Serialises the control requests of one transactional id (decide + I/O + done).
    txn_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    #: Kafka ``committed_metadata`` strings, keyed (group, topic, partition); in memory only.
    commit_metadata: dict[tuple[str, str, int], str] = field(default_factory=dict)
    bound_port: int = 0
    arrivals: ArrivalNotifier | None = None
    #: ``None`` when standalone (nothing to count into).
    metrics: DoorMetrics | None = None
    #: The cluster this broker serves in (``None``: a lone broker, every partition's leader).
    cluster: ClusterLink | None = None
    #: Transactions coordinated elsewhere that this broker holds halves of (cluster mode).
    participants: TxnParticipants = field(default_factory=TxnParticipants)
    #: Participants and decisions of this coordinator's transactions that span brokers.
    ledger: TxnLedger | None = None
    #: Ends still to be delivered to participants, by sparkmq transaction id (retried until done).
    pending_ends: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    #: The broker's users (``broker.auth.DoorAuth``) on a SASL listener; ``None``: no SASL.
    auth: Any = None
    #: True while a promoted member replays the state topic: the transactional ids' requests
    #: answer NOT_COORDINATOR (retried by the client) until it is done.
    txn_loading: bool = False
    #: The store retention listener that writes the coordinator's state again (set once it
    #: is loaded; removed when the gateway closes).
    retention_keeper: Callable[[int], None] | None = None

    @classmethod
    def create(
        cls,
        store: KafkaStore,
        config: GatewayConfig,
        loop: asyncio.AbstractEventLoop,
        transactions: TransactionService,
        cluster: ClusterLink | None = None,
    ) -> GatewayContext:
        coordinator = GroupCoordinator(
            monotonic_ms,
            CoordinatorConfig(
                initial_rebalance_delay_ms=config.initial_rebalance_delay_ms,
                min_session_timeout_ms=config.min_session_timeout_ms,
                max_session_timeout_ms=config.max_session_timeout_ms,
            ),
        )
        id_base = config.node_id << PRODUCER_ID_BLOCK_BITS if cluster is not None else 0
        txn_log = TxnStateLog(cast(TxnStateStore, store), id_base)
        return cls(
            store=KafkaNamedStore(store),
            config=config,
            loop=loop,
            executor=ThreadPoolExecutor(config.executor_workers, thread_name_prefix="kafka-gw"),
            coordinator=coordinator,
            # Empty until recover_transactions replays the state topic, before serving.
            producer_ids=ProducerIdAllocator(txn_log, {}, id_base),
            transactions=transactions,
            txn=TxnCoordinator(store.now_ms, TxnConfig(max_timeout_ms=config.max_transaction_timeout_ms)),
            transactional_ids=TransactionalIds(txn_log, {}),
            txn_log=txn_log,
            arrivals=ArrivalNotifier(loop),
            cluster=cluster,
            ledger=TxnLedger(txn_log, {}) if cluster is not None else None,
        )

    def with_txn_tables(self, tables: TxnTables) -> GatewayContext:
        """A copy of this context whose coordinator, producer ids, transactional ids and ledger
        are what ``tables`` say (the coordinator's entries are installed by ``recover``)."""
        log = self.txn_log
        return replace(
            self,
            producer_ids=ProducerIdAllocator(log, tables.producer_ids, log.id_base),
            txn=TxnCoordinator(self.txn.now_ms, self.txn.config),
            transactional_ids=TransactionalIds(log, tables.transactional_ids),
            ledger=TxnLedger(log, tables.ledger) if self.cluster is not None else None,
        )

    def adopt_txn_state(self, staged: GatewayContext) -> None:
        """Take the coordinator state built in ``staged`` (:meth:`with_txn_tables`; on the loop)."""
        self.producer_ids = staged.producer_ids
        self.txn = staged.txn
        self.transactional_ids = staged.transactional_ids
        self.ledger = staged.ledger
        self.transactions = staged.transactions

    async def run_blocking(self, fn: Callable[..., T], *args: object) -> T:
        """Run a blocking store call on the gateway's thread pool."""
        return await self.loop.run_in_executor(self.executor, functools.partial(fn, *args))

    @property
    def advertised_host(self) -> str:
        return self.config.advertised_host or self.config.host

    @property
    def advertised_port(self) -> int:
        return self.config.advertised_port or self.bound_port

    def producer_lock(self, producer_id: int) -> asyncio.Lock:
        lock = self.producer_locks.get(producer_id)
        if lock is None:
            lock = self.producer_locks[producer_id] = asyncio.Lock()
        return lock

    def txn_lock(self, transactional_id: str) -> asyncio.Lock:
        """Taken before a producer lock, never after one."""
        lock = self.txn_locks.get(transactional_id)
        if lock is None:
            lock = self.txn_locks[transactional_id] = asyncio.Lock()
        return lock

    def topic_id(self, topic: str) -> uuid.UUID:
        """A stable per-topic UUID (Metadata v10+); never used to address topics."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"sparkmq:{self.config.cluster_id}:{topic}")
