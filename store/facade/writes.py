"""The facade's write role: produce (single, batch, columnar, transaction halves), relocations
of parked messages and records built whole elsewhere.

Every method checks the store is open and delegates to :class:`~store.write.appender.Appender`
(the put path, under its lock) or :class:`~store.write.relocator.Relocator`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from store.facade.base import FacadeState
from store.format.record import RecordFields
from store.types import Message, PutResult
from store.write.columns import ProduceColumns, ProduceOutcome, put_columns, put_halves
from store.write.encoded import EncodedRecords
from store.write.idempotence import ProducerRef
from store.write.relocate import Relocation
from store.write.relocate_batch import RelocatedRecords
from store.write.relocator import RelocateOutcome, RelocationPointers
from store.write.results import BatchPutResult
from store.write.transactions import HalfOf


class Writes(FacadeState):
    """Produce and append (a role of :class:`~store.message_store.MessageStore`)."""

    # ------------------------------------------------------------------ produce
    def put_message(self, msg: Message) -> PutResult:
        return self.put_messages([msg])[0]

    def put_messages(
        self, messages: Sequence[Message], *, producer: ProducerRef | None = None
    ) -> list[PutResult]:
        """Store all messages or none; results in input order.

        Every message is validated and encoded before anything is written; queue offsets are
        assigned atomically (contiguous per queue within the call). With ``producer`` the call
        is idempotent: a retry with the same ref returns the original results (see
        :mod:`store.write.idempotence`); the messages' UNIQ_KEYs are then derived from the ref.
        """
        self._ensure_open()
        return self._appender.put_messages(messages, producer=producer)

    def put_batch(
        self,
        topic: str,
        bodies: Sequence[bytes],
        *,
        queue_ids: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
        tags: str | Sequence[str | None] | None = None,
        keys: Sequence[str | None] | None = None,
        properties: Mapping[str, str | Sequence[str | None]] | None = None,
        uniq_keys: Sequence[str | None] | None = None,
        born_timestamps_ms: int | Sequence[int] | npt.NDArray[np.integer] | None = None,
        producer: ProducerRef | None = None,
    ) -> BatchPutResult:
        """Columnar :meth:`put_messages` for one topic: no Python object per message.

        ``keys`` holds each message's KEYS value (space-separated tokens, None for none);
        ``properties`` maps a name to one value for all or a value per message. Delay levels
        and transactions are not taken here (use :meth:`put_messages`). All or nothing.
        """
        self._ensure_open()
        return self._appender.put_batch(
            topic,
            bodies,
            queue_ids=queue_ids,
            tags=tags,
            keys=keys,
            properties=properties,
            uniq_keys=uniq_keys,
            born_timestamps_ms=born_timestamps_ms,
            producer=producer,
        )

    def put_columns(
        self, topic: str, columns: ProduceColumns, *, producer: ProducerRef | None = None
    ) -> ProduceOutcome:
        """The columnar produce entry every door uses (:mod:`store.write.columns`): queues
        resolved (explicit, sharding key, round robin), then :meth:`put_batch` when nothing is
        scheduled, else :meth:`put_messages`. All or nothing; the topic is auto-created when
        allowed. With ``producer`` the call is idempotent."""
        self._ensure_open()
        return put_columns(self._appender, topic, columns, producer)

    def put_halves(
        self,
        topic: str,
        columns: ProduceColumns,
        *,
        transaction: HalfOf,
        producer: ProducerRef | None = None,
    ) -> ProduceOutcome:
        """:meth:`put_columns` for the halves of ``transaction``, bound for ``topic``.

        They are stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC`` /
        ``REAL_QID`` / ``TRAN_MSG`` / ``__transactionId__`` / ``PGROUP`` (and
        ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when ``transaction.immunity_s`` is set), exactly as
        :meth:`put_messages` stores ``transaction_prepared`` messages; ``topic`` must exist or be
        auto-creatable. Delayed and timer messages are refused. The result is in the half topic;
        register the halves with the transaction service (``store.publish``) to end them.
        """
        self._ensure_open()
        return put_halves(self._appender, topic, columns, transaction, producer)

    # ------------------------------------------------------------------ relocations and records
    def relocate(self, requests: Sequence[Relocation]) -> list[PutResult | None]:
        """Deliver (or roll) parked messages: one new record per request, appended atomically.

        Each request names a parked record by CommitLog offset; the new record is rebuilt from
        its bytes (:mod:`store.write.relocate`). The result is ``None`` where RocketMQ drops the
        message (a delayed half message) or the parked record is gone (deleted by retention:
        logged). Raises :class:`NotRelocatable` for a position that does not hold a parked
        record, with nothing written. :meth:`relocate_pointers` is the columnar form.
        """
        pointers = RelocationPointers.of(
            [r.commitlog_offset for r in requests],
            [int(r.kind) for r in requests],
            [r.enqueue_ms for r in requests],
            [r.dequeue_ms for r in requests],
        )
        outcome = self.relocate_pointers(pointers)
        out: list[PutResult | None] = [None] * len(requests)
        if outcome.result is not None:
            for row, result in zip(
                outcome.rows.tolist(), outcome.result.results(outcome.topics), strict=True
            ):
                out[row] = result
        return out

    def relocate_pointers(self, pointers: RelocationPointers) -> RelocateOutcome:
        """:meth:`relocate` for requests as columns, without a result object per record: the
        parked records read in one pass, rebuilt by byte edits (:mod:`store.write.relocator`),
        appended in one atomic append."""
        self._ensure_open()
        return self._relocator.relocate(pointers)

    def relocated_records(self, pointers: RelocationPointers) -> RelocatedRecords:
        """What :meth:`relocate_pointers` would append now, without appending it (how a resumed
        relocation tells which requests it had written)."""
        self._ensure_open()
        return self._relocator.build(pointers)

    def check_writable(self) -> None:
        """Raise what a write would raise now for this store's role (``StoreClosed``;
        ``NotMaster`` / ``ReplicaFenced`` / ``SlaveNotAvailable`` in a replica group); nothing
        is written. For work that must not start where it cannot finish."""
        self._appender.check_writable()

    def append_records(self, records: Sequence[RecordFields]) -> list[PutResult]:
        """Append records built whole elsewhere (a transaction's final messages and its op) in
        one atomic append: every field is kept but the queue offset, CommitLog offset and store
        timestamp. A user topic must exist or be auto-creatable."""
        self._ensure_open()
        if not records:
            return []
        encoded = EncodedRecords.of_fields(records)
        return self._appender.put_encoded(encoded).results(encoded.topics)

    def append_encoded(self, records: EncodedRecords) -> BatchPutResult:
        """:meth:`append_records` for records already encoded (``store.write.encoded``): one
        atomic append, results by position (``records.topics[i]`` is record i's topic)."""
        self._ensure_open()
        return self._appender.put_encoded(records)

    def now_ms(self) -> int:
        """The store's clock (injected in tests)."""
        return self._clock()

    def new_uniq_key(self) -> str:
        """A fresh UNIQ_KEY (RocketMQ ``MessageClientIDSetter``), for records the broker writes."""
        return self._appender.new_uniq_keys(1)[0]

    def new_uniq_keys(self, count: int) -> list[str]:
        """``count`` fresh UNIQ_KEYs."""
        return self._appender.new_uniq_keys(count)
