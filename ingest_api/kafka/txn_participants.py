"""A participant broker's view of transactions coordinated elsewhere (pure state, in memory).

When a transaction's partitions span brokers, each partition leader stores that partition's
records as halves of the same sparkmq transaction ``kafka-<producer id>-<epoch>-<n>``. Only the
coordinator (:mod:`ingest_api.kafka.txn_coordinator`) decides anything; a participant learns
from it, before the producer may write there, *which* transaction is open for a
transactional id (:class:`Mirror`, pushed when the coordinator adds this broker to the
transaction, or pulled from the coordinator on a miss — after a restart of this broker), and
checks each transactional Produce against it: another producer id is
INVALID_PRODUCER_ID_MAPPING, an older epoch PRODUCER_FENCED, no open transaction here
INVALID_TXN_STATE. A participant never ends, times out or aborts a transaction by itself: its
halves end when the coordinator asks (``/kafka/peer/txn/end``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ingest_api.kafka.errors import ErrorCode
from ingest_api.kafka.txn_coordinator import transaction_id


@dataclass(frozen=True, slots=True)
class Mirror:
    """The open transaction of a transactional id, as its coordinator announced it."""

    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    timeout_ms: int
    coordinator: str
    #: False once the coordinator ended it here.
    open: bool = True

    @property
    def transaction_id(self) -> str:
        return transaction_id(self.producer_id, self.epoch, self.sequence)

    def newer_than(self, other: Mirror) -> bool:
        """Whether this announcement replaces ``other`` (same producer: a later epoch or
        transaction; another producer id: the coordinator re-initialised the id)."""
        if self.producer_id != other.producer_id:
            return True
        return (self.epoch, self.sequence) >= (other.epoch, other.sequence)


class TxnParticipants:
    """Transactional id -> :class:`Mirror` (single-threaded: the gateway's loop)."""

    def __init__(self) -> None:
        self._mirrors: dict[str, Mirror] = {}

    def get(self, transactional_id: str) -> Mirror | None:
        return self._mirrors.get(transactional_id)

    def register(self, mirror: Mirror) -> bool:
        """Install an announcement unless a newer one is known; True when installed. An
        announcement of the transaction already ended here does not reopen it."""
        current = self._mirrors.get(mirror.transactional_id)
        if current is not None and not mirror.newer_than(current):
            return False
        if current is not None and current.transaction_id == mirror.transaction_id and not current.open:
            return False
        self._mirrors[mirror.transactional_id] = mirror
        return True

    def check(self, transactional_id: str, producer_id: int, epoch: int) -> ErrorCode:
        """May this producer write halves here now? (NONE: into ``get(...).transaction_id``)."""
        mirror = self._mirrors.get(transactional_id)
        if mirror is None or mirror.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if epoch < mirror.epoch:
            return ErrorCode.PRODUCER_FENCED
        if epoch > mirror.epoch or not mirror.open:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    def ended(self, transactional_id: str, transaction_id: str) -> None:
        """The coordinator ended ``transaction_id`` here: no more halves may join it."""
        mirror = self._mirrors.get(transactional_id)
        if mirror is not None and mirror.transaction_id == transaction_id:
            self._mirrors[transactional_id] = replace(mirror, open=False)
