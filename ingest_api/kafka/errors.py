"""Kafka error codes and the gateway's own faults.

``ErrorCode`` values are the wire ``error_code`` (int16) of the Kafka protocol; only the codes
this gateway can return are listed. Expected outcomes travel as codes inside responses; the
exceptions below are *faults* that end a connection (a malformed frame, an API or version the
gateway never advertised). Each carries ``retriable`` like every sparkmq error.
"""

from __future__ import annotations

import enum

from store import SparkMQError


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    OPERATION_NOT_ATTEMPTED = 55
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    UNSUPPORTED_COMPRESSION_TYPE = 76
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105


class KafkaGatewayError(SparkMQError):
    """Root of the gateway's faults."""

    code = "kafka_gateway_error"


class MalformedFrame(KafkaGatewayError):
    """A frame that cannot be a Kafka request (bad size, truncated header or body).

    The connection it arrived on is closed; the client may reconnect.
    """

    code = "kafka_malformed_frame"
    retriable = True


class UnsupportedRequest(KafkaGatewayError):
    """An API key or version the gateway does not advertise (Kafka closes the socket too)."""

    code = "kafka_unsupported_request"


class CorruptBatch(KafkaGatewayError):
    """A produced record batch that fails validation; mapped to a per-partition error code."""

    code = "kafka_corrupt_batch"

    def __init__(self, message: str, error_code: ErrorCode = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(message)
        self.error_code = error_code
