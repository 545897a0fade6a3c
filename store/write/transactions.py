"""The records that end a transaction, as RocketMQ's ``EndTransactionProcessor`` writes them.

* **Final message** (commit, ``endMessageTransaction``): the half's body, flag, born timestamp
  and host, store host, reconsume times and properties string copied whole (``REAL_TOPIC``,
  ``REAL_QID``, ``TRAN_MSG``, ``PGROUP``, ``__transactionId__`` and ``UNIQ_KEY`` stay in the
  bytes: RocketMQ clears them from the map only after building the string); topic and queue are
  ``REAL_TOPIC``/``REAL_QID``; the transaction bits of the sysflag become COMMIT (8); and
  ``preparedTransactionOffset`` is the half's CommitLog offset.
* **Op message** (``getOpMessage``): topic ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 (the half's
  queue), tag ``d``, sysflag 0, its own UNIQ_KEY, and as body the half queue offsets each
  followed by ``","`` (``"12,13,"``), which RocketMQ's check service reads. Two properties are a
  sparkmq extension that RocketMQ readers ignore: ``__transactionId__`` (the transaction the
  offsets belong to) and ``SPARKMQ_TX_END`` (``commit``, ``rollback`` or ``discard``), so the
  outcome of an end is in the log, not only in memory.
* **Discard** (``resolveDiscardMsg``, after the last check): the half copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 with ``TRANSACTION_CHECK_TIMES`` set; sparkmq also
  writes an op for it (RocketMQ does not), so a discarded half counts as ended.
* **Offsets** (sparkmq; Kafka's ``TxnOffsetCommit``): consumer offsets that a transaction commits
  together with its messages travel as one more half, whose ``REAL_TOPIC`` is
  ``rmq_sys_trans_offsets`` (queue 0) and whose body is JSON
  ``{"group": G, "offsets": {topic: {queue id: next offset}}}`` (store names). The commit's
  final record of it lands in ``rmq_sys_trans_offsets`` in the same append as the final
  messages; a rollback leaves it a half forever, never applied.
"""

from __future__ import annotations

import enum
import json
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from store.errors import InvalidArgument
from store.format.record import BODY_POS, RecordFields
from store.format.record_check import RecordStatus, check_record
from store.format.vocabulary import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PGROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRAN_MSG,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TX_END,
    PROPERTY_UNIQ_KEY,
    SYSFLAG_TX_COMMIT,
    SYSFLAG_TX_MASK,
)
from store.names import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OFFSETS_TOPIC, TRANS_OP_HALF_TOPIC

#: RocketMQ ``TransactionalMessageUtil.REMOVE_TAG``.
OP_REMOVE_TAG = "d"
#: The outcome property of an op record (sparkmq extension).
#: Producer group of the transactions the Kafka door's coordinator owns
#: (``kafka:<transactional.id>``): they end by EndTxn or its timeout, never over HTTP.
KAFKA_PRODUCER_GROUP_PREFIX = "kafka:"


class TxOutcome(enum.StrEnum):
    COMMIT = "commit"
    ROLLBACK = "rollback"
    DISCARD = "discard"


@dataclass(frozen=True, slots=True)
class HalfOf:
    """Which transaction the halves of a put belong to (``MessageStore.put_halves``).

    ``immunity_s``: RocketMQ's ``CHECK_IMMUNITY_TIME_IN_SECONDS``, no check-back before it."""

    producer_group: str
    transaction_id: str
    immunity_s: int | None = None

    def message_properties(self) -> dict[str, str]:
        """What a transactional message carries from its producer (``put_messages`` with
        ``transaction_prepared``); the store adds ``REAL_TOPIC``/``REAL_QID``/``TRAN_MSG``."""
        props = {PROPERTY_PGROUP: self.producer_group, PROPERTY_TRANSACTION_ID: self.transaction_id}
        if self.immunity_s is not None:
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(self.immunity_s)
        return props


def half_properties(
    real_topic: str, real_queue_id: str, transaction_id: str, producer_group: str | None = None
) -> dict[str, str]:
    """The properties that make a record a half (RocketMQ ``parseHalfMessageInner``), in the
    order the store writes them after the message's own."""
    props = {
        PROPERTY_REAL_TOPIC: real_topic,
        PROPERTY_REAL_QID: real_queue_id,
        PROPERTY_TRAN_MSG: "true",
        PROPERTY_TRANSACTION_ID: transaction_id,
    }
    if producer_group is not None:
        props[PROPERTY_PGROUP] = producer_group
    return props


class NotAHalf(InvalidArgument):
    """The CommitLog position does not hold a half message."""

    code = "not_a_half_message"


class Half:
    """A stored half message, decoded once: what ending it needs."""

    __slots__ = ("born_ms", "commitlog_offset", "fields", "producer_group", "queue_offset", "transaction_id")

    def __init__(self, raw: bytes | memoryview, commitlog_offset: int) -> None:
        check = check_record(raw, 0, check_crc=False)
        if check.status is not RecordStatus.OK or check.header is None or check.properties is None:
            raise NotAHalf(f"no valid record at {commitlog_offset}: {check.status.value} {check.reason}")
        if check.topic != TRANS_HALF_TOPIC:
            raise NotAHalf(f"the record at {commitlog_offset} is in {check.topic!r}, not a half message")
        header, props = check.header, dict(check.properties)
        if not props.get(PROPERTY_REAL_TOPIC) or not props.get(PROPERTY_REAL_QID, "").isdigit():
            raise NotAHalf(f"half message at {commitlog_offset} without REAL_TOPIC/REAL_QID")
        self.commitlog_offset = commitlog_offset
        self.queue_offset = header.queue_offset
        self.born_ms = header.born_timestamp
        self.producer_group = props.get(PROPERTY_PGROUP, "")
        self.transaction_id = props.get(PROPERTY_TRANSACTION_ID) or props.get(PROPERTY_UNIQ_KEY, "")
        self.fields = RecordFields(
            topic=TRANS_HALF_TOPIC,
            body=bytes(raw[BODY_POS : BODY_POS + header.body_len]),
            queue_id=header.queue_id,
            flag=header.flag,
            properties=props,
            sys_flag=header.sys_flag,
            born_timestamp_ms=header.born_timestamp,
            born_host=(socket.inet_ntoa(header.born_ip), header.born_port),
            store_host=(socket.inet_ntoa(header.store_ip), header.store_port),
            reconsume_times=header.reconsume_times,
            prepared_transaction_offset=0,
        )

    @property
    def real_topic(self) -> str:
        return (self.fields.properties or {})[PROPERTY_REAL_TOPIC]

    @property
    def real_queue_id(self) -> int:
        return int((self.fields.properties or {})[PROPERTY_REAL_QID])

    @property
    def uniq_key(self) -> str:
        return (self.fields.properties or {}).get(PROPERTY_UNIQ_KEY, "")


def final_record(half: Half) -> RecordFields:
    """The committed message for ``half`` (see the module docstring)."""
    return half.fields._replace(
        topic=half.real_topic,
        queue_id=half.real_queue_id,
        sys_flag=(half.fields.sys_flag & ~SYSFLAG_TX_MASK) | SYSFLAG_TX_COMMIT,
        prepared_transaction_offset=half.commitlog_offset,
    )


def discard_record(half: Half, check_times: int) -> RecordFields:
    """The half as ``TRANS_CHECK_MAX_TIME_TOPIC`` stores it after its last check."""
    properties = dict(half.fields.properties or {})
    properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(check_times)
    return half.fields._replace(topic=TRANS_CHECK_MAX_TIME_TOPIC, queue_id=0, properties=properties)


def op_body(half_queue_offsets: Sequence[int]) -> bytes:
    if not half_queue_offsets:
        return b""
    return (",".join(map(str, half_queue_offsets)) + ",").encode("utf-8")


def parse_op_body(body: bytes) -> list[int]:
    """Half queue offsets of an op body (RocketMQ splits on ``","``; non-numbers are skipped)."""
    return [int(part) for part in body.decode("utf-8", "replace").split(",") if part.strip().isdigit()]


def op_record(
    half_queue_offsets: Sequence[int],
    *,
    transaction_id: str,
    outcome: TxOutcome,
    uniq_key: str,
    born_ms: int,
    store_host: tuple[str, int],
) -> RecordFields:
    """The op ("d") record ending the halves at ``half_queue_offsets``."""
    return RecordFields(
        topic=TRANS_OP_HALF_TOPIC,
        body=op_body(half_queue_offsets),
        queue_id=0,
        flag=0,
        properties={
            PROPERTY_TAGS: OP_REMOVE_TAG,
            PROPERTY_UNIQ_KEY: uniq_key,
            PROPERTY_TRANSACTION_ID: transaction_id,
            PROPERTY_TX_END: outcome.value,
        },
        sys_flag=0,
        born_timestamp_ms=born_ms,
        born_host=store_host,
        store_host=store_host,
        reconsume_times=0,
        prepared_transaction_offset=0,
    )


# --- offsets committed by a transaction ------------------------------------------------------
#: group -> store topic -> queue id -> next offset to consume.
OffsetCommits = Mapping[str, Mapping[str, Mapping[int, int]]]


@dataclass(frozen=True, slots=True)
class TxOffsets:
    """One offsets record: the next offsets ``group`` consumes, per store topic and queue."""

    group: str
    offsets: Mapping[str, Mapping[int, int]]


def offsets_body(entry: TxOffsets) -> bytes:
    """Compact JSON, topics and queues sorted (the record is golden-byte tested)."""
    document = {
        "group": entry.group,
        "offsets": {
            topic: {str(q): int(o) for q, o in sorted(queues.items())}
            for topic, queues in sorted(entry.offsets.items())
        },
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode("utf-8")


def parse_offsets_body(body: bytes) -> TxOffsets:
    """Inverse of :func:`offsets_body`; raises :class:`InvalidArgument` on anything else."""
    try:
        document = json.loads(body)
        group = document["group"]
        offsets = {
            str(topic): {int(q): int(o) for q, o in queues.items()}
            for topic, queues in document["offsets"].items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InvalidArgument(f"not a transaction offsets record: {exc!r}") from exc
    if not isinstance(group, str) or not group:
        raise InvalidArgument("transaction offsets record without a group")
    return TxOffsets(group, offsets)


def offsets_half_record(
    entry: TxOffsets,
    *,
    half: HalfOf,
    uniq_key: str,
    born_ms: int,
    store_host: tuple[str, int],
) -> RecordFields:
    """The half carrying ``entry`` (its final goes to ``rmq_sys_trans_offsets`` queue 0)."""
    properties = {PROPERTY_UNIQ_KEY: uniq_key}
    properties.update(half_properties(TRANS_OFFSETS_TOPIC, "0", half.transaction_id, half.producer_group))
    if half.immunity_s is not None:
        properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(half.immunity_s)
    return RecordFields(
        topic=TRANS_HALF_TOPIC,
        body=offsets_body(entry),
        queue_id=0,
        flag=0,
        properties=properties,
        sys_flag=0,
        born_timestamp_ms=born_ms,
        born_host=store_host,
        store_host=store_host,
        reconsume_times=0,
        prepared_transaction_offset=0,
    )
