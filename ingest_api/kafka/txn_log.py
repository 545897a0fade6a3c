"""The coordinator's state topic ``rmq_sys_KAFKA_TXN_STATE`` queue 0: appends and the replay.

* :meth:`TxnStateLog.append` puts records (:mod:`ingest_api.kafka.txn_record`) in one atomic
  store append and returns once the store has them: as durable as a produce (SYNC_FLUSH:
  fsynced; ``--replication sync``: every in-sync slave has them, or the store's error is
  raised and nothing is acknowledged). The coordinator's tables change only after it returns,
  so a client is told of a state change only once it is in the log.
* :meth:`TxnStateLog.load` folds every record of the queue into :class:`TxnTables`: run when
  the gateway starts and when a slave of a replica group is promoted (it replicated the
  records like messages, so it rebuilds what its master acknowledged).
* **Upgrade**: a store written before these records kept the state in three side files of its
  config directory (``kafkaProducerIds.json``, ``kafkaTransactionalIds.json``,
  ``kafkaTxnParticipants.json``). While the topic is empty they are read once, written as
  records, and renamed ``*.migrated``; a store that cannot write yet (a slave) keeps them
  and uses what they say until it can.
* **Retention** deletes whole CommitLog files, and old records with them. Before it does,
  :meth:`TxnStateLog.keep_before` (a store retention listener) writes the whole live state
  again (:meth:`TxnTables.records`: it is small) when a record lies in those files, so the
  retained log always holds it. Every state change and the rewrite hold :attr:`TxnStateLog.lock`
  from the in-memory change to the append, so no change falls between the snapshot and its
  records. A member that cannot write (a slave) logs it: its master's rewrite, replicated,
  is what it keeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from ingest_api.kafka.txn_record import (
    DurableId,
    LedgerEntry,
    TxnRecord,
    TxnTables,
    decode_txn_record,
    encode_txn_record,
)
from store import (
    KAFKA_TXN_STATE_TOPIC,
    GetResult,
    InvalidArgument,
    PutResult,
    RecordFields,
    SparkMQError,
    read_json,
)

log = logging.getLogger(__name__)

QUEUE_ID = 0
RECORD_TAG = "txn"
_READ_CHUNK = 256
PRODUCER_IDS_FILE = "kafkaProducerIds.json"
TRANSACTIONAL_IDS_FILE = "kafkaTransactionalIds.json"
TXN_PARTICIPANTS_FILE = "kafkaTxnParticipants.json"
MIGRATED_SUFFIX = ".migrated"


class TxnStateStore(Protocol):
    """The slice of ``store.MessageStore`` the state log uses (every call blocks)."""

    @property
    def config(self) -> Any: ...
    def now_ms(self) -> int: ...
    def append_records(self, records: Sequence[RecordFields]) -> list[PutResult]: ...
    def min_offset(self, topic: str, queue_id: int) -> int: ...
    def max_offset(self, topic: str, queue_id: int) -> int: ...
    def get_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int = 32, tag_expression: str | None = "*"
    ) -> GetResult: ...
    def add_retention_listener(self, listener: Callable[[int], None]) -> None: ...
    def remove_retention_listener(self, listener: Callable[[int], None]) -> None: ...


class TxnStateLog:
    """Reads and writes the state topic of one store (thread-safe as the store is)."""

    def __init__(self, store: TxnStateStore, id_base: int = 0) -> None:
        self.store = store
        #: This member's producer-id block (``member_id << 32`` in a cluster, else 0).
        self.id_base = id_base
        self.config_dir = Path(store.config.store_dir) / "config"
        #: Held by every state change from its append to its in-memory change (re-entrant).
        self.lock = threading.RLock()

    def append(self, records: Sequence[TxnRecord]) -> None:
        """Put ``records`` in one atomic append (raises the store's errors, nothing written)."""
        if not records:
            return
        host = (self.store.config.store_host, self.store.config.store_port)
        now = self.store.now_ms()
        self.store.append_records(
            [
                RecordFields(
                    topic=KAFKA_TXN_STATE_TOPIC,
                    body=encode_txn_record(record),
                    queue_id=QUEUE_ID,
                    properties={"TAGS": RECORD_TAG},
                    born_timestamp_ms=now,
                    born_host=host,
                    store_host=host,
                )
                for record in records
            ]
        )

    def records(self) -> Iterator[tuple[int, TxnRecord]]:
        """``(queue offset, record)`` of every retained record, in log order. Raises
        InvalidArgument naming the queue offset of a record that is not one."""
        offset = self.store.min_offset(KAFKA_TXN_STATE_TOPIC, QUEUE_ID)
        while True:
            got = self.store.get_messages(KAFKA_TXN_STATE_TOPIC, QUEUE_ID, offset, _READ_CHUNK)
            if not got.messages:
                return
            for view in got.messages:
                try:
                    yield view.queue_offset, decode_txn_record(view.body)
                except InvalidArgument as exc:
                    raise InvalidArgument(
                        f"{KAFKA_TXN_STATE_TOPIC} queue offset {view.queue_offset}: {exc}"
                    ) from None
            offset = got.next_offset

    def first_position(self) -> int | None:
        """The CommitLog offset of the oldest retained record (``None``: there is none)."""
        offset = self.store.min_offset(KAFKA_TXN_STATE_TOPIC, QUEUE_ID)
        got = self.store.get_messages(KAFKA_TXN_STATE_TOPIC, QUEUE_ID, offset, 1)
        return got.messages[0].commitlog_offset if got.messages else None

    def keep_before(self, end: int, snapshot: Callable[[], TxnTables]) -> int:
        """Retention is about to delete the CommitLog below ``end``: when a record lies there,
        append the whole live state (``snapshot()``, taken under :attr:`lock`) again; returns
        how many records were written. Raises the store's errors (nothing written)."""
        with self.lock:
            first = self.first_position()
            if first is None or first >= end:
                return 0
            records = snapshot().records()
            self.append(records)
        log.info("Kafka transaction state: %d records written again before offset %d", len(records), end)
        return len(records)

    def load(self) -> TxnTables:
        """The tables the records say; on a store with none, the side files of an upgrade
        (written as records when the store takes them; see the module docstring)."""
        tables = TxnTables()
        count = 0
        for _, record in self.records():
            tables.apply(record)
            count += 1
        if count == 0:
            tables = self._migrate()
        log.info(
            "Kafka transaction state: %d records replayed, %d transactional ids, %d ledger entries",
            count,
            len(tables.transactional_ids),
            len(tables.ledger),
        )
        return tables

    def _migrate(self) -> TxnTables:
        tables = read_side_files(self.config_dir, self.id_base)
        present = [p for p in _side_files(self.config_dir) if p.exists()]
        if not present:
            return tables
        try:
            self.append(tables.records())
        except SparkMQError as exc:
            log.warning("Kafka transaction state: side files kept, not written as records yet: %s", exc)
            return tables
        for path in present:
            path.rename(path.with_name(path.name + MIGRATED_SUFFIX))
        log.warning("Kafka transaction state: %s written as records and renamed *.migrated", present)
        return tables


def _side_files(config_dir: Path) -> list[Path]:
    return [config_dir / n for n in (PRODUCER_IDS_FILE, TRANSACTIONAL_IDS_FILE, TXN_PARTICIPANTS_FILE)]


def read_side_files(config_dir: Path, id_base: int) -> TxnTables:
    """The tables the side files of an older store say (missing files: empty). Raises
    InvalidArgument naming the file for one that is malformed."""
    tables = TxnTables()
    producer_ids = read_json(config_dir / PRODUCER_IDS_FILE)
    if producer_ids is not None:
        next_id = producer_ids.get("next_producer_id")
        if not isinstance(next_id, int) or next_id < 0:
            raise InvalidArgument(f"{config_dir / PRODUCER_IDS_FILE}: next_producer_id missing or invalid")
        tables.producer_ids[id_base] = next_id
    tables.transactional_ids = _read_ids(config_dir / TRANSACTIONAL_IDS_FILE)
    tables.ledger = _read_ledger(config_dir / TXN_PARTICIPANTS_FILE)
    return tables


def _read_ids(path: Path) -> dict[str, DurableId]:
    raw = (read_json(path) or {}).get("transactionalIds", {})
    try:
        assert isinstance(raw, dict)
        return {
            str(tid): DurableId(
                int(v["producerId"]),
                int(v["producerEpoch"]),
                int(v.get("lastProducerEpoch", -1)),
                int(v["timeoutMs"]),
            )
            for tid, v in raw.items()
        }
    except (AssertionError, KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(f"{path}: malformed ({exc!r})") from None


def _read_ledger(path: Path) -> dict[str, LedgerEntry]:
    raw = (read_json(path) or {}).get("transactions", {})
    if not isinstance(raw, dict):
        raise InvalidArgument(f"{path}: transactions is not an object")
    entries: dict[str, LedgerEntry] = {}
    for txid, value in raw.items():
        try:
            assert isinstance(value, dict)
            decision = value.get("decision")
            if decision not in (None, "commit", "abort"):
                raise ValueError(f"decision {decision!r}")
            entries[str(txid)] = LedgerEntry(
                transaction_id=str(txid),
                transactional_id=str(value["transactionalId"]),
                participants=frozenset(str(p) for p in value["participants"]),
                partitions=frozenset((str(t), int(q)) for t, q in value.get("partitions", [])),
                decision=None if decision is None else decision == "commit",
            )
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"{path}: entry {txid!r} is malformed ({exc})") from None
    return entries
