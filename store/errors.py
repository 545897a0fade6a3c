"""Faults raised by the storage engine.

Expected outcomes ("no new message", "offset too small", "not found") are *values*
(see :mod:`store.types`); only real faults are exceptions. Every error derives from
:class:`SparkMQError`, carries context in its message and says whether a retry can help.
"""

from __future__ import annotations


class SparkMQError(Exception):
    """Root of every sparkmq error.

    ``code`` is a stable machine-readable identifier (the HTTP layer uses it as the
    ``error`` field); ``retriable`` tells a client whether retrying the same call may succeed.
    """

    code: str = "internal_error"
    retriable: bool = False


class StoreError(SparkMQError):
    """A fault inside the message store."""

    code = "store_error"


class InvalidArgument(StoreError):
    """A caller passed a value the store refuses (bad name, bad queue id, bad delay level...)."""

    code = "invalid_argument"


class InvalidTopicName(InvalidArgument):
    code = "invalid_topic"


class InvalidGroupName(InvalidArgument):
    code = "invalid_group"


class UnknownTopic(StoreError):
    """The topic does not exist and auto-creation is off."""

    code = "unknown_topic"


class UnknownQueue(InvalidArgument):
    """The queue id is outside the topic's queue count."""

    code = "unknown_queue"


class MessageTooLarge(InvalidArgument):
    """A body is larger than ``StoreConfig.max_message_size_bytes`` (4 MiB by default)."""

    code = "message_too_large"


class StoreClosed(StoreError):
    """The store was closed; no read or write is possible."""

    code = "store_closed"
    retriable = True


class StoreNotWritable(StoreError):
    """The store cannot accept writes (disk full, I/O error, flush timeout).

    ``appended`` says the write is in the log all the same: the refusal came after the append
    (the fsync failed or timed out, the replicas did not acknowledge it). It is not
    acknowledged, but a retry must find it, and an idempotent door must count its sequence as
    taken (Kafka puts a batch's sequence in its producer state once the batch is in the log)."""

    code = "store_not_writable"
    retriable = True
    appended = False


class FlushTimeout(StoreNotWritable):
    """SYNC_FLUSH: the group commit did not fsync within ``sync_flush_timeout_ms``."""

    code = "flush_timeout"


class IndexBehind(StoreError):
    """The key index has not caught up with the acknowledged writes (its thread is failing or
    far behind), so a lookup that must see every stored message cannot be answered. An
    idempotent retry, a sink resume or a key query is refused rather than answered from a
    partial index; retry once :meth:`MessageStore.health` is ok again."""

    code = "index_behind"
    retriable = True


class StoreLocked(StoreError):
    """Another process holds the store directory's ``lock`` file."""

    code = "store_locked"


class CorruptStore(StoreError):
    """On-disk data cannot be interpreted (bad magic, bad size) where recovery cannot help."""

    code = "corrupt_store"


class DataLost(StoreError):
    """Requested offsets were removed by retention (used when ``failOnDataLoss`` is true)."""

    code = "data_lost"


# --- replication (store/ha): refusals a producer sees, faults of a replicated append ---------


class NotMaster(StoreNotWritable):
    """This store is a replica that does not take writes now (a slave, or a member waiting for
    its role): nothing was written. RocketMQ ``SERVICE_NOT_AVAILABLE``; send to the master."""

    code = "not_master"
    status = "SERVICE_NOT_AVAILABLE"


class ReplicaFenced(NotMaster):
    """The master was fenced (its coordination session is suspended or lost, or it is changing
    role): it neither writes nor acknowledges. A write it had appended but not acknowledged may
    be truncated by the next master; the client must retry (idempotently) elsewhere."""

    code = "replica_fenced"


class SlaveNotAvailable(StoreNotWritable):
    """Too few replicas are in sync (``min_insync``, the master included). With
    ``appended=False`` the write was refused before anything was stored; with ``appended=True``
    it was stored on the master but the in-sync set shrank below the minimum before it was
    replicated, so it is not acknowledged (Kafka ``NOT_ENOUGH_REPLICAS_AFTER_APPEND``).
    RocketMQ ``SLAVE_NOT_AVAILABLE`` (RocketMQ 5 says ``IN_SYNC_REPLICAS_NOT_ENOUGH``)."""

    code = "slave_not_available"
    status = "SLAVE_NOT_AVAILABLE"

    def __init__(self, message: str, *, appended: bool = False) -> None:
        super().__init__(message)
        self.appended = appended


class FlushSlaveTimeout(StoreNotWritable):
    """SYNC replication: the in-sync replicas did not all hold the write within the ack
    timeout. It is stored on the master (and may yet replicate) but is not acknowledged; an
    idempotent retry returns it once it is replicated. RocketMQ ``FLUSH_SLAVE_TIMEOUT``."""

    code = "flush_slave_timeout"
    status = "FLUSH_SLAVE_TIMEOUT"
    appended = True

    def __init__(self, message: str, *, end_offset: int) -> None:
        super().__init__(message)
        self.end_offset = end_offset


class ReplicationGap(StoreError):
    """:meth:`MessageStore.append_replicated` was given bytes that do not start exactly at the
    local CommitLog max offset (a gap or an overlap), or that would cross a CommitLog file end
    (the master's file size differs). Nothing was written."""

    code = "replication_gap"


class ReplicatedDataCorrupt(CorruptStore):
    """Bytes received from the master do not hold valid CommitLog records (layout or body
    CRC). They were removed again; nothing of them was dispatched."""

    code = "replicated_data_corrupt"
