"""RocketMQ 5 status codes: the ``Status`` every gRPC answer carries, and sparkmq's faults mapped to them.

The official clients read ``status.code`` (``apache.rocketmq.v2.Code``), not the gRPC status:
gRPC-level errors are for transport problems only. ``OK`` is 20000; ``MESSAGE_NOT_FOUND``
(an empty receive) and ``MULTIPLE_RESULTS`` count as success for the clients; 400xx become
``BadRequestException``, 404xx ``NotFoundException``, ``TOO_MANY_REQUESTS`` is not retried by a
producer, 500xx are (the Python client's ``MessagingResultChecker``).

:data:`CODE_BY_ERROR` maps each stable sparkmq error code (``SparkMQError.code``, the same
names the HTTP door answers with) to a ``Code`` in one place; codes not listed are
``INTERNAL_SERVER_ERROR``. Refusals decided by this door are :class:`GrpcRefusal`, which carry
their ``Code`` themselves.
"""

from __future__ import annotations

from typing import Final

from ingest_api.grpc.v2 import definition_pb2 as pb
from store import SparkMQError

Code = pb.Code

#: sparkmq error code -> RocketMQ 5 ``Code``. Retriable faults of the store or the cluster map
#: to 500xx codes, which a producer retries on another queue.
CODE_BY_ERROR: Final[dict[str, int]] = {
    "invalid_argument": Code.BAD_REQUEST,
    "invalid_topic": Code.ILLEGAL_TOPIC,
    "invalid_group": Code.ILLEGAL_CONSUMER_GROUP,
    "unknown_topic": Code.TOPIC_NOT_FOUND,
    "unknown_queue": Code.NOT_FOUND,
    "unknown_transaction": Code.INVALID_TRANSACTION_ID,
    # not MESSAGE_NOT_FOUND: the clients take that one for "an empty receive", a success
    "unknown_message": Code.NOT_FOUND,
    "unknown_group": Code.CONSUMER_GROUP_NOT_FOUND,
    "producer_group_mismatch": Code.FORBIDDEN,
    "not_a_half_message": Code.INVALID_TRANSACTION_ID,
    "message_too_large": Code.MESSAGE_BODY_TOO_LARGE,
    "store_closed": Code.INTERNAL_SERVER_ERROR,
    "store_not_writable": Code.INTERNAL_SERVER_ERROR,
    "flush_timeout": Code.MASTER_PERSISTENCE_TIMEOUT,
    "index_behind": Code.INTERNAL_SERVER_ERROR,
    "store_locked": Code.INTERNAL_SERVER_ERROR,
    "data_lost": Code.NOT_FOUND,
    "corrupt_store": Code.INTERNAL_SERVER_ERROR,
    "invalid_schedule": Code.ILLEGAL_DELIVERY_TIME,
    # POP consumption (broker.pop.errors)
    "invalid_receipt_handle": Code.INVALID_RECEIPT_HANDLE,
    "receipt_handle_expired": Code.INVALID_RECEIPT_HANDLE,
    "receipt_handle_mismatch": Code.INVALID_RECEIPT_HANDLE,
    "invalid_max_messages": Code.BAD_REQUEST,
    "invalid_invisible_time": Code.ILLEGAL_INVISIBLE_TIME,
    "invalid_wait_time": Code.ILLEGAL_POLLING_TIME,
    "invalid_group_settings": Code.BAD_REQUEST,
    "group_kind_conflict": Code.ILLEGAL_CONSUMER_GROUP,
    # the cluster layer
    "cluster_unavailable": Code.INTERNAL_SERVER_ERROR,
    "queue_unavailable": Code.INTERNAL_SERVER_ERROR,
    "no_live_broker": Code.INTERNAL_SERVER_ERROR,
    "invalid_placement": Code.BAD_REQUEST,
    "invalid_broker_name": Code.BAD_REQUEST,
    "broker_name_taken": Code.BAD_REQUEST,
    "store_belongs_elsewhere": Code.INTERNAL_SERVER_ERROR,
    "corrupt_route": Code.INTERNAL_SERVER_ERROR,
    # replication: the proxy's SendStatus mapping (SLAVE_NOT_AVAILABLE -> HA_NOT_AVAILABLE, ...)
    "not_master": Code.INTERNAL_SERVER_ERROR,
    "replica_fenced": Code.INTERNAL_SERVER_ERROR,
    "slave_not_available": Code.HA_NOT_AVAILABLE,
    "flush_slave_timeout": Code.SLAVE_PERSISTENCE_TIMEOUT,
    "replication_gap": Code.HA_NOT_AVAILABLE,
    "replicated_data_corrupt": Code.INTERNAL_SERVER_ERROR,
}


class GrpcRefusal(SparkMQError):
    """A request this door refuses, with the RocketMQ 5 ``Code`` to answer (an ``int`` of
    :data:`Code`, e.g. ``ILLEGAL_MESSAGE_ID``) and a message for the client."""

    code = "grpc_refused"

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def status(code: int, message: str | None = None) -> pb.Status:
    """A ``Status``; the message defaults to the code's name (``"OK"``), as the proxy does."""
    return pb.Status(code=code, message=Code.Name(code) if message is None else message)  # type: ignore[arg-type]


def ok() -> pb.Status:
    return status(Code.OK)


def code_for(error: SparkMQError) -> int:
    """The ``Code`` that answers ``error``: its own for a :class:`GrpcRefusal`, else by its
    stable sparkmq code (``INTERNAL_SERVER_ERROR`` when unlisted)."""
    if isinstance(error, GrpcRefusal):
        return error.status_code
    return CODE_BY_ERROR.get(error.code, Code.INTERNAL_SERVER_ERROR)


def status_for(error: SparkMQError) -> pb.Status:
    """The ``Status`` that answers ``error`` (message: the error's text, else its code)."""
    return status(code_for(error), str(error) or error.code)
