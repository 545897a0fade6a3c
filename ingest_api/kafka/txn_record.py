"""The Kafka transaction coordinator's state records (``rmq_sys_KAFKA_TXN_STATE`` queue 0).

Every change of the coordinator's durable state is one CommitLog record of this system topic
(sparkmq's ``__transaction_state``), put through the store's append path, so a replica group
acknowledges it under the same rule as a message and a promoted slave holds it
(:mod:`ingest_api.kafka.txn_log`). The record body is big-endian::

    offset  size  field
    0       1     VERSION       1
    1       1     KIND          TxnRecordKind (below)
    2       .     the kind's fields; STR = [LEN u16][LEN bytes of UTF-8]

    1 PRODUCER_IDS    [BASE i64][NEXT i64]
                      the ids BASE .. BASE + NEXT - 1 are handed out (the member's block)
    2 TRANSACTIONAL   [TID STR][PRODUCER_ID i64][EPOCH i16][LAST_EPOCH i16][TIMEOUT_MS i32][STATE u8]
                      the transactional id's producer id and epoch; STATE: 0 Empty, 5 CompleteAbort
                      (a fence) -- what the coordinator says when the log holds no transaction
                      of this epoch (an open or ended one is read from its halves and ends)
    3 PARTICIPANTS    [TXID STR][TID STR][NBROKERS u16][NBROKERS x STR]
                      [NPARTS u32][NPARTS x ([TOPIC STR][PARTITION i32])]
                      the ledger: brokers (and partitions) of transaction TXID, added to
    4 DECISION        [TXID STR][COMMIT u8]        the ledger: TXID's outcome (1 commit, 0 abort)
    5 COMPLETE        [TXID STR]                   the ledger: every participant ended TXID

The replay (:class:`TxnTables`) is a fold: PRODUCER_IDS keeps the largest NEXT per BASE,
TRANSACTIONAL the last record per id, PARTICIPANTS unions, DECISION sets, COMPLETE removes.

Pure functions on bytes; a body that is not exactly this raises
:class:`~store.errors.InvalidArgument`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field, replace
from typing import Final

from ingest_api.kafka.txn_coordinator import TxnState
from store import InvalidArgument

TXN_RECORD_VERSION: Final = 1
#: VERSION, KIND.
HEAD: Final = struct.Struct(">BB")
STR_LEN: Final = struct.Struct(">H")
#: BASE, NEXT.
PRODUCER_IDS: Final = struct.Struct(">qq")
#: PRODUCER_ID, EPOCH, LAST_EPOCH, TIMEOUT_MS, STATE.
TRANSACTIONAL: Final = struct.Struct(">qhhiB")
NBROKERS: Final = struct.Struct(">H")
NPARTS: Final = struct.Struct(">I")
PARTITION: Final = struct.Struct(">i")
COMMIT: Final = struct.Struct(">B")
MAX_STR_BYTES: Final = 0xFFFF

#: STATE codes of a TRANSACTIONAL record.
STATE_CODES: Final = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
}
_STATES: Final = {code: state for state, code in STATE_CODES.items()}


class TxnRecordKind(enum.IntEnum):
    PRODUCER_IDS = 1
    TRANSACTIONAL = 2
    PARTICIPANTS = 3
    DECISION = 4
    COMPLETE = 5


@dataclass(frozen=True, slots=True)
class DurableId:
    """What the coordinator keeps of a transactional id across restarts and failovers."""

    producer_id: int
    epoch: int
    last_epoch: int
    timeout_ms: int
    #: The state when the log holds no transaction of this epoch.
    state: TxnState = TxnState.EMPTY


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The ledger's record of one transaction that spans brokers."""

    transaction_id: str
    transactional_id: str
    participants: frozenset[str] = frozenset()
    partitions: frozenset[tuple[str, int]] = frozenset()
    #: ``None`` while open; ``True`` commit, ``False`` abort once decided.
    decision: bool | None = None


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Producer ids ``base .. base + next_counter - 1`` are handed out."""

    base: int
    next_counter: int


@dataclass(frozen=True, slots=True)
class IdChanged:
    transactional_id: str
    durable: DurableId


@dataclass(frozen=True, slots=True)
class Decided:
    transaction_id: str
    commit: bool


@dataclass(frozen=True, slots=True)
class Completed:
    transaction_id: str


#: PARTICIPANTS is a :class:`LedgerEntry` (its decision not encoded: always ``None`` there).
TxnRecord = ProducerIdBlock | IdChanged | LedgerEntry | Decided | Completed


def _str(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > MAX_STR_BYTES:
        raise InvalidArgument(f"{value[:40]!r}... is longer than 65535 bytes")
    return STR_LEN.pack(len(raw)) + raw


def encode_txn_record(record: TxnRecord) -> bytes:
    """The record body of ``record``; raises InvalidArgument for a string over 65535 bytes or
    a number out of its field's range."""
    try:
        return HEAD.pack(TXN_RECORD_VERSION, int(_kind(record))) + _encode_fields(record)
    except struct.error as exc:
        raise InvalidArgument(f"a Kafka transaction state record out of range: {exc}") from None


def _kind(record: TxnRecord) -> TxnRecordKind:
    if isinstance(record, ProducerIdBlock):
        return TxnRecordKind.PRODUCER_IDS
    if isinstance(record, IdChanged):
        return TxnRecordKind.TRANSACTIONAL
    if isinstance(record, LedgerEntry):
        return TxnRecordKind.PARTICIPANTS
    if isinstance(record, Decided):
        return TxnRecordKind.DECISION
    return TxnRecordKind.COMPLETE


def _encode_fields(record: TxnRecord) -> bytes:
    if isinstance(record, ProducerIdBlock):
        return PRODUCER_IDS.pack(record.base, record.next_counter)
    if isinstance(record, IdChanged):
        d = record.durable
        state = STATE_CODES[d.state]
        fixed = TRANSACTIONAL.pack(d.producer_id, d.epoch, d.last_epoch, d.timeout_ms, state)
        return _str(record.transactional_id) + fixed
    if isinstance(record, LedgerEntry):
        brokers = sorted(record.participants)
        parts = sorted(record.partitions)
        return b"".join(
            [
                _str(record.transaction_id),
                _str(record.transactional_id),
                NBROKERS.pack(len(brokers)),
                *(_str(b) for b in brokers),
                NPARTS.pack(len(parts)),
                *(_str(t) + PARTITION.pack(p) for t, p in parts),
            ]
        )
    if isinstance(record, Decided):
        return _str(record.transaction_id) + COMMIT.pack(int(record.commit))
    return _str(record.transaction_id)


class _Reader:
    """A cursor over a body; every read raises struct.error/UnicodeDecodeError past its end."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def fixed(self, layout: struct.Struct) -> tuple[int, ...]:
        values = layout.unpack_from(self.data, self.pos)
        self.pos += layout.size
        return tuple(int(v) for v in values)

    def text(self) -> str:
        (length,) = self.fixed(STR_LEN)
        raw = self.data[self.pos : self.pos + length]
        if len(raw) != length:
            raise struct.error(f"a string of {length} bytes runs past the end")
        self.pos += length
        return raw.decode("utf-8")


def decode_txn_record(body: bytes | bytearray | memoryview) -> TxnRecord:
    """Inverse of :func:`encode_txn_record`; raises InvalidArgument on anything else."""
    reader = _Reader(bytes(body))
    try:
        version, kind = reader.fixed(HEAD)
        if version != TXN_RECORD_VERSION:
            raise InvalidArgument(f"Kafka transaction state record version {version} (this build reads 1)")
        if kind not in TxnRecordKind._value2member_map_:
            raise InvalidArgument(f"Kafka transaction state record kind {kind} is unknown")
        record = _decode_fields(TxnRecordKind(kind), reader)
    except (struct.error, UnicodeDecodeError) as exc:
        raise InvalidArgument(f"not a Kafka transaction state record: {exc}") from None
    if reader.pos != len(reader.data):
        raise InvalidArgument(f"{len(reader.data) - reader.pos} bytes after a Kafka transaction state record")
    return record


def _decode_fields(kind: TxnRecordKind, reader: _Reader) -> TxnRecord:
    if kind is TxnRecordKind.PRODUCER_IDS:
        base, next_counter = reader.fixed(PRODUCER_IDS)
        return ProducerIdBlock(base, next_counter)
    if kind is TxnRecordKind.TRANSACTIONAL:
        tid = reader.text()
        producer_id, epoch, last_epoch, timeout_ms, state = reader.fixed(TRANSACTIONAL)
        if state not in _STATES:
            raise InvalidArgument(f"transactional id {tid!r}: state code {state} is unknown")
        return IdChanged(tid, DurableId(producer_id, epoch, last_epoch, timeout_ms, _STATES[state]))
    if kind is TxnRecordKind.PARTICIPANTS:
        txid, tid = reader.text(), reader.text()
        brokers = frozenset(reader.text() for _ in range(reader.fixed(NBROKERS)[0]))
        (count,) = reader.fixed(NPARTS)
        parts = frozenset((reader.text(), reader.fixed(PARTITION)[0]) for _ in range(count))
        return LedgerEntry(txid, tid, brokers, parts)
    if kind is TxnRecordKind.DECISION:
        txid = reader.text()
        (commit,) = reader.fixed(COMMIT)
        if commit not in (0, 1):
            raise InvalidArgument(f"transaction {txid}: decision byte {commit}")
        return Decided(txid, bool(commit))
    return Completed(reader.text())


@dataclass
class TxnTables:
    """The coordinator's three tables as the records say (a pure fold, see the docstring)."""

    #: Producer-id block base -> ids handed out from it.
    producer_ids: dict[int, int] = field(default_factory=dict)
    transactional_ids: dict[str, DurableId] = field(default_factory=dict)
    ledger: dict[str, LedgerEntry] = field(default_factory=dict)

    def apply(self, record: TxnRecord) -> None:
        if isinstance(record, ProducerIdBlock):
            known = self.producer_ids.get(record.base, 0)
            self.producer_ids[record.base] = max(known, record.next_counter)
        elif isinstance(record, IdChanged):
            self.transactional_ids[record.transactional_id] = record.durable
        elif isinstance(record, LedgerEntry):
            current = self.ledger.get(record.transaction_id)
            if current is None:
                self.ledger[record.transaction_id] = replace(record, decision=None)
            else:
                self.ledger[record.transaction_id] = replace(
                    current,
                    participants=current.participants | record.participants,
                    partitions=current.partitions | record.partitions,
                )
        elif isinstance(record, Decided):
            entry = self.ledger.get(record.transaction_id)
            if entry is not None:
                self.ledger[record.transaction_id] = replace(entry, decision=record.commit)
        else:
            self.ledger.pop(record.transaction_id, None)

    def records(self) -> list[TxnRecord]:
        """Records that rebuild these tables from nothing (an upgrade's first write)."""
        out: list[TxnRecord] = [ProducerIdBlock(b, n) for b, n in sorted(self.producer_ids.items())]
        out.extend(IdChanged(t, d) for t, d in sorted(self.transactional_ids.items()))
        for txid, entry in sorted(self.ledger.items()):
            out.append(replace(entry, decision=None))
            if entry.decision is not None:
                out.append(Decided(txid, entry.decision))
        return out
