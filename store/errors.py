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
    """The store cannot accept writes (disk full, I/O error, flush timeout)."""

    code = "store_not_writable"
    retriable = True


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
