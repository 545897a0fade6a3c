"""Kafka transaction coordinator: the state of every ``transactional.id``, as a pure state machine.

States (Kafka's ``TransactionState``)::

    Empty --AddPartitionsToTxn / AddOffsetsToTxn--> Ongoing --EndTxn--> PrepareCommit | PrepareAbort
        --the end appended--> CompleteCommit | CompleteAbort --AddPartitionsToTxn--> Ongoing ...
    any state --InitProducerId--> (an ongoing transaction is aborted) Empty, epoch + 1

* One Kafka transaction is one sparkmq transaction (``store.publish.TransactionService``) with id
  ``kafka-<producer id>-<epoch>-<n>``: its Produce batches are halves, its TxnOffsetCommits an
  offsets half, EndTxn(commit) the atomic end. This module only decides; the handlers
  (:mod:`ingest_api.kafka.handlers.transactions`) do the I/O and then call the ``*_done``
  methods. They hold the transactional id's lock across decide + I/O + done, so states never
  interleave; ``Prepare*`` exists for readers (DescribeTransactions) and for Produce.
* **Fencing**: InitProducerId bumps the epoch; any request with another producer id is
  INVALID_PRODUCER_ID_MAPPING, with an older epoch PRODUCER_FENCED (the handlers turn it into
  INVALID_PRODUCER_EPOCH for API versions that predate KIP-588).
* **Timeout**: an Ongoing transaction older than its ``transaction.timeout.ms`` is aborted by the
  broker and the epoch bumped, as Kafka does (:meth:`TxnCoordinator.expired`).
* **After a restart** (:meth:`TxnCoordinator.recover`) the in-memory AddPartitionsToTxn /
  AddOffsetsToTxn of a transaction that had not written anything yet are gone. Such an entry is
  *recovered*: until its producer calls a control API again, a transactional Produce or
  TxnOffsetCommit begins the transaction implicitly, and an EndTxn with nothing ongoing
  answers NONE (there is nothing to end), instead of the INVALID_TXN_STATE that librdkafka
  treats as fatal.

Single-threaded (the gateway's event loop); time comes from an injected ``clock`` (ms).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ingest_api.kafka.errors import ErrorCode

Clock = Callable[[], int]  # milliseconds, wall clock (transaction start times survive restarts)

#: Largest producer epoch (int16); a bump past it starts a new producer id.
MAX_PRODUCER_EPOCH = 32767


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(frozen=True, slots=True)
class TxnConfig:
    #: Kafka ``transaction.max.timeout.ms``: larger ``transaction.timeout.ms`` values are refused.
    max_timeout_ms: int = 900_000


@dataclass
class TxnEntry:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    #: The epoch before the last bump: a KIP-360 InitProducerId may still name it.
    last_epoch: int = -1
    state: TxnState = TxnState.EMPTY
    #: Number of the current (or last) transaction of this producer id and epoch.
    sequence: int = 0
    partitions: set[tuple[str, int]] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    started_ms: int = -1
    #: Rebuilt after a restart; no control API seen since (see the module docstring).
    recovered: bool = False

    @property
    def transaction_id(self) -> str:
        """The sparkmq transaction id of the current (or last) transaction."""
        return transaction_id(self.producer_id, self.epoch, self.sequence)


def transaction_id(producer_id: int, epoch: int, sequence: int) -> str:
    return f"kafka-{producer_id}-{epoch}-{sequence}"


def parse_transaction_id(value: str) -> tuple[int, int, int] | None:
    """``(producer id, epoch, n)`` of a Kafka transaction's sparkmq id, else None."""
    parts = value.split("-")
    if len(parts) != 4 or parts[0] != "kafka" or not all(p.isdigit() for p in parts[1:]):
        return None
    return int(parts[1]), int(parts[2]), int(parts[3])


@dataclass(frozen=True, slots=True)
class InitPlan:
    """What InitProducerId must do: abort ``abort`` (a sparkmq id) first, if set; allocate a new
    producer id when ``new_producer_id``; else use ``producer_id`` at ``epoch``."""

    error: ErrorCode
    abort: str | None = None
    new_producer_id: bool = False
    producer_id: int = -1
    epoch: int = -1


class TxnCoordinator:
    """Transactional ids -> :class:`TxnEntry`; see the module docstring."""

    def __init__(self, clock: Clock, config: TxnConfig | None = None) -> None:
        self._clock = clock
        self.config = config or TxnConfig()
        self._entries: dict[str, TxnEntry] = {}

    def get(self, transactional_id: str) -> TxnEntry | None:
        return self._entries.get(transactional_id)

    def now_ms(self) -> int:
        return self._clock()

    def entries(self) -> list[TxnEntry]:
        return list(self._entries.values())

    # --- InitProducerId ---------------------------------------------------------------------
    def plan_init(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> InitPlan:
        """Decide an InitProducerId (``producer_id``/``epoch`` -1 unless KIP-360 names them)."""
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitPlan(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        entry = self._entries.get(transactional_id)
        if entry is None:
            if producer_id != -1:
                return InitPlan(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
            return InitPlan(ErrorCode.NONE, new_producer_id=True)
        if producer_id != -1 and (
            producer_id != entry.producer_id or epoch not in (entry.epoch, entry.last_epoch)
        ):
            return InitPlan(ErrorCode.PRODUCER_FENCED)
        if entry.state in PREPARING:
            return InitPlan(ErrorCode.CONCURRENT_TRANSACTIONS)
        abort = None
        if entry.state is TxnState.ONGOING:
            abort = entry.transaction_id
            entry.state = TxnState.PREPARE_ABORT  # end_done(None) if the abort fails
        if entry.epoch + 1 > MAX_PRODUCER_EPOCH:
            return InitPlan(ErrorCode.NONE, abort=abort, new_producer_id=True)
        return InitPlan(ErrorCode.NONE, abort=abort, producer_id=entry.producer_id, epoch=entry.epoch + 1)

    def init_done(self, transactional_id: str, producer_id: int, epoch: int, timeout_ms: int) -> TxnEntry:
        """The previous transaction (if any) is aborted and the new epoch persisted."""
        old = self._entries.get(transactional_id)
        last_epoch = old.epoch if old is not None and old.producer_id == producer_id else -1
        entry = TxnEntry(transactional_id, producer_id, epoch, timeout_ms, last_epoch=last_epoch)
        self._entries[transactional_id] = entry
        return entry

    # --- checks shared by every transactional request --------------------------------------
    def check_producer(self, transactional_id: str, producer_id: int, epoch: int) -> ErrorCode:
        entry = self._entries.get(transactional_id)
        if entry is None or entry.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch != entry.epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    def _begin(self, entry: TxnEntry) -> None:
        if entry.state is TxnState.ONGOING:
            return
        entry.state = TxnState.ONGOING
        entry.sequence += 1
        entry.partitions = set()
        entry.groups = set()
        entry.started_ms = self._clock()

    # --- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------------------
    def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> ErrorCode:
        """Begin (or join) the transaction; partitions must have been checked to exist."""
        error = self._control(transactional_id, producer_id, epoch)
        if error == ErrorCode.NONE:
            self._entries[transactional_id].partitions.update(partitions)
        return error

    def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> ErrorCode:
        error = self._control(transactional_id, producer_id, epoch)
        if error == ErrorCode.NONE:
            self._entries[transactional_id].groups.add(group_id)
        return error

    def _control(self, transactional_id: str, producer_id: int, epoch: int) -> ErrorCode:
        error = self.check_producer(transactional_id, producer_id, epoch)
        if error != ErrorCode.NONE:
            return error
        entry = self._entries[transactional_id]
        if entry.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        entry.recovered = False
        self._begin(entry)
        return ErrorCode.NONE

    # --- Produce / TxnOffsetCommit ----------------------------------------------------------
    def join(
        self,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        *,
        partition: tuple[str, int] | None = None,
        group: str | None = None,
    ) -> tuple[ErrorCode, str]:
        """A transactional Produce (``partition``) or TxnOffsetCommit (``group``): ``(error,
        sparkmq transaction id to write into)``. It needs an Ongoing transaction, except on a
        recovered entry, where it begins one."""
        error = self.check_producer(transactional_id, producer_id, epoch)
        if error != ErrorCode.NONE:
            return error, ""
        entry = self._entries[transactional_id]
        if entry.state is not TxnState.ONGOING:
            if not (entry.recovered and entry.state in COMPLETE):
                return ErrorCode.INVALID_TXN_STATE, ""
            self._begin(entry)
        if partition is not None:
            entry.partitions.add(partition)
        if group is not None:
            entry.groups.add(group)
        return ErrorCode.NONE, entry.transaction_id

    # --- EndTxn ------------------------------------------------------------------------------
    def plan_end(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> tuple[ErrorCode, str | None]:
        """``(error, sparkmq id to end)``; NONE with ``None`` means answer NONE, write nothing
        (a retried end of a completed transaction)."""
        error = self.check_producer(transactional_id, producer_id, epoch)
        if error != ErrorCode.NONE:
            return error, None
        entry = self._entries[transactional_id]
        if entry.state is TxnState.ONGOING:
            entry.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return ErrorCode.NONE, entry.transaction_id
        if entry.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS, None
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if entry.state is done or entry.recovered:
            return ErrorCode.NONE, None
        return ErrorCode.INVALID_TXN_STATE, None

    def end_done(self, transactional_id: str, committed: bool | None) -> None:
        """The end was appended (``committed`` = what happened), or failed (``None``: the
        transaction is Ongoing again, the client may retry)."""
        entry = self._entries[transactional_id]
        if committed is None:
            entry.state = TxnState.ONGOING
            return
        entry.state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT

    # --- timeouts ------------------------------------------------------------------------------
    def expired(self) -> list[TxnEntry]:
        """Ongoing transactions older than their timeout (the broker aborts them)."""
        now = self._clock()
        return [
            e
            for e in self._entries.values()
            if e.state is TxnState.ONGOING and now - e.started_ms > e.timeout_ms
        ]

    def fence_done(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        """A timed-out transaction is aborted and the producer fenced with a new epoch."""
        entry = self._entries[transactional_id]
        entry.last_epoch = entry.epoch if entry.producer_id == producer_id else -1
        entry.producer_id, entry.epoch = producer_id, epoch
        entry.state = TxnState.COMPLETE_ABORT
        entry.sequence = 0
        entry.recovered = False

    # --- restart -----------------------------------------------------------------------------
    def recover(self, entry: TxnEntry) -> None:
        """Install an entry rebuilt from the state topic and the log (see module docs)."""
        entry.recovered = True
        if entry.state is TxnState.ONGOING:
            entry.started_ms = self._clock()  # an open transaction gets a full timeout again
        self._entries[entry.transactional_id] = entry
