"""``sparkmq.client``: producers and consumers that know where each queue lives.

The client discovers brokers and routes from any broker (``GET /cluster``, ``GET
/topics/{t}/route``; a lone broker answers as a one-broker cluster named ``local``), sends
each message straight to the broker that owns its queue, refreshes routes on a miss and
retries with the same ``Idempotency-Key``. See docs/client.md.
"""

from sparkmq.client.client import Client
from sparkmq.client.config import DEFAULT_ENDPOINT, ClientConfig, RetryPolicy, parse_endpoints
from sparkmq.client.consumer import Consumer, Start
from sparkmq.client.errors import (
    AccessDenied,
    BatchIncomplete,
    BrokerError,
    BrokerUnreachable,
    ClientError,
    InvalidArgument,
    NoLiveBroker,
    NotFound,
    QueueUnavailable,
    RequestRefused,
    RouteMiss,
    UnknownTopic,
)
from sparkmq.client.messages import Message, PullResult, QueueOffsets, ReceivedMessage, SendResult
from sparkmq.client.producer import Producer
from sparkmq.client.push import PushStats, PushWorker
from sparkmq.client.routes import LOCAL_BROKER, BrokerInfo, ClusterInfo, QueueRoute, TopicRoute
from sparkmq.client.simple_consumer import AckOutcome, PopMessage, SimpleConsumer

__all__ = [
    "DEFAULT_ENDPOINT",
    "LOCAL_BROKER",
    "AccessDenied",
    "AckOutcome",
    "BatchIncomplete",
    "BrokerError",
    "BrokerInfo",
    "BrokerUnreachable",
    "Client",
    "ClientConfig",
    "ClientError",
    "ClusterInfo",
    "Consumer",
    "InvalidArgument",
    "Message",
    "NoLiveBroker",
    "NotFound",
    "PopMessage",
    "Producer",
    "PullResult",
    "PushStats",
    "PushWorker",
    "QueueOffsets",
    "QueueRoute",
    "QueueUnavailable",
    "ReceivedMessage",
    "RequestRefused",
    "RetryPolicy",
    "RouteMiss",
    "SendResult",
    "SimpleConsumer",
    "Start",
    "TopicRoute",
    "UnknownTopic",
    "parse_endpoints",
]
