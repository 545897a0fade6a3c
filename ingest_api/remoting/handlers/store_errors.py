"""Refusals of the core and faults of the store as RocketMQ response codes, in one place.

A store error that names its RocketMQ status (``NotMaster.status = "SERVICE_NOT_AVAILABLE"``,
``SlaveNotAvailable``, ``FlushSlaveTimeout``) is answered with that code; the rest by kind:
unknown topic -> TOPIC_NOT_EXIST, a value the store refuses -> MESSAGE_ILLEGAL, a store that
cannot write -> SERVICE_NOT_AVAILABLE (the client retries elsewhere), anything else SYSTEM_ERROR.
A :class:`broker.errors.BrokerError` (the core's own refusal: a bad field, a queue outside the
topic, a missing right) maps by its HTTP-class status: 400/409/413 -> MESSAGE_ILLEGAL, 401/403
-> NO_PERMISSION, 404 and 421 (a queue another broker owns: the client retries elsewhere and
refreshes its route) -> TOPIC_NOT_EXIST, 503 -> SERVICE_NOT_AVAILABLE, else SYSTEM_ERROR. A POP
group's offsets (``group_kind_conflict``) are NO_PERMISSION.
"""

from __future__ import annotations

from broker.errors import BrokerError
from ingest_api.remoting.codec import RemotingCommand, response_to
from ingest_api.remoting.codes import ResponseCode
from store import InvalidArgument, SparkMQError, StoreNotWritable, UnknownTopic

_BY_STATUS = {
    400: ResponseCode.MESSAGE_ILLEGAL,
    409: ResponseCode.MESSAGE_ILLEGAL,
    413: ResponseCode.MESSAGE_ILLEGAL,
    401: ResponseCode.NO_PERMISSION,
    403: ResponseCode.NO_PERMISSION,
    404: ResponseCode.TOPIC_NOT_EXIST,
    421: ResponseCode.TOPIC_NOT_EXIST,
    503: ResponseCode.SERVICE_NOT_AVAILABLE,
}


def store_error_code(exc: SparkMQError | BrokerError) -> ResponseCode:
    """The response code RocketMQ's broker gives for the fault or refusal ``exc``."""
    if isinstance(exc, BrokerError):
        return _BY_STATUS.get(exc.status, ResponseCode.SYSTEM_ERROR)
    if exc.code == "group_kind_conflict":  # a POP group's offsets: not this consumer's to use
        return ResponseCode.NO_PERMISSION
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


def answer_store_error(cmd: RemotingCommand, exc: SparkMQError | BrokerError) -> RemotingCommand:
    """The error response to ``cmd`` for ``exc`` (remark: the error's message)."""
    return response_to(cmd, store_error_code(exc), f"{type(exc).__name__}: {exc}")
