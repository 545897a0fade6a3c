"""The broker's side of transaction check-backs: producer groups, the check dispatcher, and the
transaction resolver's decisions.

* :class:`ProducerGroups`: ``config/producerGroups.json``, each producer group's ``check_url``
  (RocketMQ registers a producer's channel by heartbeat; over HTTP the producer registers a URL).
* :class:`CheckDispatcher`: POSTs ``{"transaction_id", "producer_group", "topic", "msg_id",
  "uniq_key", "check_times"}`` to the group's URL and ends the transaction with the answer
  (``commit`` / ``rollback``; ``unknown`` does nothing) through the same idempotent end as
  ``POST /transactions/{id}``. Outside Spark, so a slow producer stalls nothing: connect 1 s /
  read 3 s timeouts, a concurrency limit per group (further checks wait their turn; beyond
  ``max_waiting`` waiting checks a group's new ones are skipped), and a circuit breaker per
  group (after ``failure_threshold`` failures in a row, checks are skipped for ``open_s``).
* :class:`TransactionBoard`: applies a batch of the resolver's decisions once per batch id
  (``config/transactionChecks.json`` remembers the last one): DISCARD ends the transaction
  (idempotent), CHECK goes to the dispatcher. A crash between applying and remembering repeats
  the batch's checks, which are queries: harmless.

A check counts when the resolver decides it, like RocketMQ (which counts a check even when no
producer channel exists): a producer offline for ``check_max`` intervals has its transaction
moved to ``TRANS_CHECK_MAX_TIME_TOPIC``, from where nothing is lost (docs/transactions.md).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pyarrow as pa

from broker.threads import run_blocking
from store import (
    InvalidArgument,
    MessageStore,
    SparkMQError,
    TxOutcome,
    encode_msg_id,
    read_json,
    wall_clock_ms,
    write_json_atomically,
)
from store.publish import EndRequest, EndResult, TransactionService, UnknownTransaction

log = logging.getLogger("sparkmq.transactions")


#: What ``GroupRegistry.put`` takes as a check URL (the document states the same pattern).
def _ipv6_pattern() -> str:
    """RFC 3986's ``IPv6address`` (what ``urlparse`` accepts between brackets)."""
    h16 = "[0-9A-Fa-f]{1,4}"
    octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
    ls32 = rf"(?:{h16}:{h16}|{octet}(?:\.{octet}){{3}})"
    forms = [rf"(?:{h16}:){{6}}{ls32}", rf"::(?:{h16}:){{5}}{ls32}"]
    for before, after in ((0, 4), (1, 3), (2, 2), (3, 1), (4, 0)):
        head = f"(?:(?:{h16}:){{0,{before}}}{h16})?" if before else f"(?:{h16})?"
        forms.append(f"{head}::" + (f"(?:{h16}:){{{after}}}" if after else "") + ls32)
    forms += [rf"(?:(?:{h16}:){{0,5}}{h16})?::{h16}", rf"(?:(?:{h16}:){{0,6}}{h16})?::"]
    return "(?:" + "|".join(forms) + ")"


#: A producer group's check-back URL: absolute http(s), a host (or a bracketed IPv6 address),
#: printable ASCII (``TransactionBoard`` checks it, then ``urlparse``: 400 ``invalid_argument``).
CHECK_URL_PATTERN = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://(?:[A-Za-z0-9._~%!$&'()*+,;=:-]*@)?"
    rf"(?:\[{_ipv6_pattern()}\]|[A-Za-z0-9._~%!$&'()*+,;=-]+)(?::[0-9]*)?(?:[/?#][\x21-\x7e]*)?$"
)

_CHECK_URL = re.compile(CHECK_URL_PATTERN)

ACTION_CHECK, ACTION_DISCARD = 0, 1
GROUPS_FILE = "producerGroups.json"
APPLIED_FILE = "transactionChecks.json"


class ProducerGroups:
    """Producer group -> check-back URL, persisted atomically in the store's config dir."""

    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / GROUPS_FILE
        document = read_json(self.path) or {}
        self._groups: dict[str, dict[str, Any]] = dict(document.get("producerGroups", {}))

    def get(self, group: str) -> dict[str, Any] | None:
        return self._groups.get(group)

    def all(self) -> dict[str, dict[str, Any]]:
        return dict(self._groups)

    def put(self, group: str, check_url: str) -> bool:
        """Register (or change) ``group``'s URL; returns whether the group is new."""
        if _CHECK_URL.fullmatch(check_url) is None:
            raise InvalidArgument(f"check_url must be an http(s) URL, got {check_url!r}")
        try:
            parsed = urlparse(check_url)
        except ValueError as exc:  # e.g. an unbalanced '[' in the host ("Invalid IPv6 URL")
            raise InvalidArgument(f"check_url is not a URL: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidArgument(f"check_url must be an http(s) URL, got {check_url!r}")
        created = group not in self._groups
        self._groups[group] = {"check_url": check_url, "registered_ms": wall_clock_ms()}
        write_json_atomically(self.path, {"producerGroups": self._groups})
        return created

    def delete(self, group: str) -> bool:
        if self._groups.pop(group, None) is None:
            return False
        write_json_atomically(self.path, {"producerGroups": self._groups})
        return True


@dataclass
class Breaker:
    failures: int = 0
    open_until: float = 0.0


@dataclass
class CheckStats:
    outcomes: Counter[str] = field(default_factory=Counter)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] += 1


class CheckDispatcher:
    """Sends check-backs and ends transactions with the producers' answers."""

    def __init__(
        self,
        service: TransactionService,
        groups: ProducerGroups,
        *,
        concurrency: int = 8,
        max_waiting: int = 100_000,
        failure_threshold: int = 5,
        open_s: float = 10.0,
        connect_timeout_s: float = 1.0,
        read_timeout_s: float = 3.0,
    ) -> None:
        self.service = service
        self.groups = groups
        self.concurrency = concurrency
        self.max_waiting = max_waiting
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self._timeout = httpx.Timeout(read_timeout_s, connect=connect_timeout_s)
        self._client: httpx.AsyncClient | None = None
        self._inflight: Counter[str] = Counter()
        self._breakers: dict[str, Breaker] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = CheckStats()
        #: Set by the board: ends from check answers join the HTTP ends' group commit.
        self.ends: EndCoalescer | None = None
        #: Doors that reach producers themselves (the gRPC door's Telemetry streams): for a
        #: group with no check URL, each is asked in turn; one that returns True has sent the
        #: check, and the producer's answer ends the transaction through that door.
        self.pushers: list[Callable[[dict[str, Any]], bool]] = []

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout)
        return self._client

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def submit(self, check: dict[str, Any]) -> None:
        """Start a check-back (returns at once; call on the event loop)."""
        group = str(check["producer_group"])
        registered = self.groups.get(group)
        if registered is None:
            if any(push(check) for push in self.pushers):
                self.stats.count("pushed")
                return
            self.stats.count("no_check_url")
            return
        breaker = self._breakers.setdefault(group, Breaker())
        if breaker.open_until > time.monotonic():
            self.stats.count("circuit_open")
            return
        if self._inflight[group] >= self.concurrency + self.max_waiting:
            self.stats.count("group_busy")
            return
        self._inflight[group] += 1
        task = asyncio.get_running_loop().create_task(self._check(str(registered["check_url"]), check))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, url: str, check: dict[str, Any]) -> None:
        group = str(check["producer_group"])
        breaker = self._breakers[group]
        slots = self._slots.setdefault(group, asyncio.Semaphore(self.concurrency))
        try:
            async with slots:
                await self._send(url, check, group, breaker)
        finally:
            self._inflight[group] -= 1

    async def _send(self, url: str, check: dict[str, Any], group: str, breaker: Breaker) -> None:
        if breaker.open_until > time.monotonic():
            self.stats.count("circuit_open")
            return
        tx = self.service.get(str(check["transaction_id"]))
        if tx is not None and tx.outcome is not None:
            self.stats.count("ended_meanwhile")
            return
        try:
            response = await self._http().post(url, json=check)
        except httpx.TimeoutException:
            self._failed(breaker, "timeout", check)
            return
        except httpx.HTTPError as exc:
            self._failed(breaker, "unreachable", check, exc)
            return
        if response.status_code >= 300:
            self._failed(breaker, "http_error", check, response.status_code)
            return
        try:
            action = str(response.json().get("action", "")).lower()
        except (ValueError, AttributeError):
            action = ""
        breaker.failures = 0
        action = "unknown" if action == "unknow" else action  # RocketMQ spells it UNKNOW
        if action not in ("commit", "rollback", "unknown"):
            self.stats.count("bad_answer")
            log.warning("check of %s: producer answered %r", check["transaction_id"], response.text[:200])
            return
        self.stats.count(f"answer_{action}")
        if action in ("commit", "rollback"):
            outcome = TxOutcome.COMMIT if action == "commit" else TxOutcome.ROLLBACK
            try:
                request = EndRequest(str(check["transaction_id"]), outcome, group)
                if self.ends is not None:  # grouped with concurrent ends into one append
                    await self.ends.end(request)
                else:
                    await run_blocking(self.service.end, request.transaction_id, outcome, group)
            except UnknownTransaction:
                log.warning("check answer for unknown transaction %s", check["transaction_id"])

    def _failed(self, breaker: Breaker, why: str, check: dict[str, Any], detail: object = None) -> None:
        self.stats.count(why)
        breaker.failures += 1
        if breaker.failures >= self.failure_threshold:
            breaker.open_until = time.monotonic() + self.open_s
            breaker.failures = 0
            self.stats.count("circuit_opened")
        log.info("check of %s failed (%s %s)", check["transaction_id"], why, detail or "")


@dataclass(frozen=True)
class AppliedBatch:
    requests: int
    discarded: int
    checks: int
    already_applied: bool


class TransactionBoard:
    """The transaction service, its check dispatcher and the resolver's applied batches."""

    def __init__(self, store: MessageStore, service: TransactionService, groups: ProducerGroups) -> None:
        self.store = store
        self.service = service
        self.groups = groups
        self.dispatcher = CheckDispatcher(service, groups)
        self.ends = EndCoalescer(service)
        self.dispatcher.ends = self.ends
        self._applied_path = store.config.store_dir / "config" / APPLIED_FILE
        self.last_applied = int((read_json(self._applied_path) or {}).get("lastAppliedBatch", -1))
        self._lock = asyncio.Lock()

    @classmethod
    def open(cls, store: MessageStore) -> TransactionBoard:
        service = TransactionService.open(store)
        if service.repaired:
            log.warning("transactions: repaired %d end(s) torn by a crash", service.repaired)
        return cls(store, service, ProducerGroups(store.config.store_dir / "config"))

    async def apply_batch(self, batch_id: int, table: pa.Table) -> AppliedBatch:
        self.store.check_writable()  # a slave applies no check-back batch (NotMaster, retried)
        async with self._lock:
            if batch_id <= self.last_applied:
                return AppliedBatch(table.num_rows, 0, 0, already_applied=True)
            rows = table.to_pylist()
            discarded = checks = 0
            host = (self.store.config.store_host, self.store.config.store_port)
            for row in rows:
                txid = str(row["transaction_id"])
                tx = self.service.get(txid)
                if tx is not None:
                    tx.check_times = max(tx.check_times, int(row["check_times"] or 0))
                    tx.last_check_ms = int(row["decided_ms"])
                if row["action"] == ACTION_DISCARD:
                    try:
                        await run_blocking(
                            self.service.end,
                            txid,
                            TxOutcome.DISCARD,
                            None,
                            check_times=int(row["check_times"] or 0),
                        )
                        discarded += 1
                    except UnknownTransaction:
                        log.warning("discard of unknown transaction %s", txid)
                elif tx is not None and tx.outcome is None:
                    checks += 1
                    self.dispatcher.submit(
                        {
                            "transaction_id": txid,
                            "producer_group": row["producer_group"],
                            "topic": row["topic"],
                            "msg_id": encode_msg_id(host, int(row["commitlog_offset"])),
                            "uniq_key": row["uniq_key"],
                            "check_times": int(row["check_times"] or 0),
                        }
                    )
            self.last_applied = batch_id
            await run_blocking(write_json_atomically, self._applied_path, {"lastAppliedBatch": batch_id})
            return AppliedBatch(len(rows), discarded, checks, already_applied=False)

    def metrics_text(self) -> str:
        lines = [
            "# HELP sparkmq_transactions_pending Transactions with halves and no end yet.",
            "# TYPE sparkmq_transactions_pending gauge",
            f"sparkmq_transactions_pending {len(self.service.pending())}",
            "# HELP sparkmq_transaction_checks_total Check-backs by outcome.",
            "# TYPE sparkmq_transaction_checks_total counter",
        ]
        lines.extend(
            f'sparkmq_transaction_checks_total{{outcome="{outcome}"}} {count}'
            for outcome, count in sorted(self.dispatcher.stats.outcomes.items())
        )
        return "\n".join(lines) + "\n"


class EndCoalescer:
    """Group commit for transaction ends: concurrent ``POST /transactions/{id}`` requests are
    ended by one :meth:`TransactionService.end_many` call (one append for all their final
    messages and ops), like :class:`broker.coalescer.ProduceCoalescer` for produce."""

    MAX_GROUP = 512
    GATHER_TURNS = 4

    def __init__(self, service: TransactionService) -> None:
        self.service = service
        self._pending: list[tuple[EndRequest, asyncio.Future[EndResult]]] = []
        self._drainer: asyncio.Task[None] | None = None

    async def end(self, request: EndRequest) -> EndResult:
        future: asyncio.Future[EndResult] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._drainer is None:
            self._drainer = asyncio.create_task(self._drain())
        return await future

    def _end_each(self, requests: list[EndRequest]) -> list[EndResult | SparkMQError]:
        try:
            return self.service.end_many(requests)
        except SparkMQError as group_error:
            if len(requests) == 1:
                return [group_error]
        outcomes: list[EndResult | SparkMQError] = []
        for request in requests:  # the group failed as a whole: each request on its own
            try:
                outcomes.extend(self.service.end_many([request]))
            except SparkMQError as error:
                outcomes.append(error)
        return outcomes

    async def _drain(self) -> None:
        try:
            while self._pending:
                for _ in range(self.GATHER_TURNS):
                    if len(self._pending) >= self.MAX_GROUP:
                        break
                    await asyncio.sleep(0)
                group, self._pending = self._pending[: self.MAX_GROUP], self._pending[self.MAX_GROUP :]
                try:
                    outcomes = await run_blocking(self._end_each, [r for r, _ in group])
                except BaseException as exc:
                    for _, future in group:
                        if not future.done():
                            future.set_exception(exc)
                    raise
                for (_, future), outcome in zip(group, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, SparkMQError):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
        finally:
            self._drainer = None
