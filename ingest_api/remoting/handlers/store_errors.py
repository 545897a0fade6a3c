"""Store faults as RocketMQ response codes, in one place.

A store error that names its RocketMQ status (``NotMaster.status = "SERVICE_NOT_AVAILABLE"``,
``SlaveNotAvailable``, ``FlushSlaveTimeout``) is answered with that code; the rest by kind:
unknown topic -> TOPIC_NOT_EXIST, a value the store refuses -> MESSAGE_ILLEGAL, a store that
cannot write -> SERVICE_NOT_AVAILABLE (the client retries elsewhere), anything else SYSTEM_ERROR.
"""

from __future__ import annotations

from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from store import InvalidArgument, SparkMQError, StoreNotWritable, UnknownTopic


def store_error_code(exc: SparkMQError) -> ResponseCode:
    """The response code RocketMQ's broker gives for the fault ``exc``."""
    named = getattr(exc, "status", None)
    if isinstance(named, str) and named in ResponseCode.__members__:
        return ResponseCode[named]
    if isinstance(exc, UnknownTopic):
        return ResponseCode.TOPIC_NOT_EXIST
    if isinstance(exc, InvalidArgument):
        return ResponseCode.MESSAGE_ILLEGAL
    if isinstance(exc, StoreNotWritable):
        return ResponseCode.SERVICE_NOT_AVAILABLE
    return ResponseCode.SYSTEM_ERROR


def answer_store_error(cmd: RemotingCommand, exc: SparkMQError) -> RemotingCommand:
    """The error response to ``cmd`` for ``exc`` (remark: the store's message)."""
    return response_to(cmd, store_error_code(exc), f"{type(exc).__name__}: {exc}")
