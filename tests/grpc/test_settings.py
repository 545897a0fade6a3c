"""The Telemetry settings reply, built as the proxy's GrpcClientSettingsManager does."""

from __future__ import annotations

import pytest
from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.settings import DEFAULT_RETRY_DELAYS_MS, GroupPolicy, ServerSettings, settings_reply
from ingest_api.grpc.status import Code, GrpcRefusal
from ingest_api.grpc.v2 import definition_pb2 as pb


def producer_settings() -> pb.Settings:
    return pb.Settings(
        client_type=pb.PRODUCER,
        access_point=pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.0.1", port=8081)]),
        request_timeout=Duration(seconds=3),
        publishing=pb.Publishing(topics=[pb.Resource(name="orders")]),
        user_agent=pb.UA(language=pb.PYTHON, version="5.1.2"),
    )


def consumer_settings(kind: int = pb.SIMPLE_CONSUMER) -> pb.Settings:
    entry = pb.SubscriptionEntry(
        topic=pb.Resource(name="orders"), expression=pb.FilterExpression(type=pb.TAG, expression="*")
    )
    return pb.Settings(
        client_type=kind,  # type: ignore[arg-type]
        request_timeout=Duration(seconds=3),
        subscription=pb.Subscription(
            group=pb.Resource(name="G"), subscriptions=[entry], long_polling_timeout=Duration(seconds=5)
        ),
    )


def test_a_producer_gets_publishing_limits_and_an_exponential_backoff() -> None:
    reply = settings_reply(producer_settings(), server=ServerSettings(max_body_bytes=1234))
    assert reply.status.code == Code.OK and reply.status.message == "OK"
    settings = reply.settings
    # pitfall 1: the Python producer reads publishing.max_body_size unconditionally
    assert settings.publishing.max_body_size == 1234 and settings.publishing.validate_message_type
    assert [t.name for t in settings.publishing.topics] == ["orders"]
    policy = settings.backoff_policy
    assert policy.max_attempts == 3 and policy.WhichOneof("strategy") == "exponential_backoff"
    assert policy.exponential_backoff.initial.ToMilliseconds() == 10
    assert policy.exponential_backoff.max.ToMilliseconds() == 1000
    assert policy.exponential_backoff.multiplier == 2.0
    assert settings.HasField("metric") and not settings.metric.on
    # the client's own fields are echoed
    assert settings.request_timeout.seconds == 3 and settings.user_agent.version == "5.1.2"
    assert settings.access_point.addresses[0].port == 8081


def test_a_consumer_gets_batch_polling_fifo_and_the_groups_retries() -> None:
    group = GroupPolicy(fifo=True, max_retries=3, retry_delays_ms=(1000, 2000))
    settings = settings_reply(consumer_settings(pb.PUSH_CONSUMER), group).settings
    subscription = settings.subscription
    assert subscription.receive_batch_size == 32 and subscription.fifo
    assert subscription.long_polling_timeout.ToMilliseconds() == 20_000  # the server's, not the client's 5 s
    assert subscription.group.name == "G" and subscription.subscriptions[0].expression.expression == "*"
    policy = settings.backoff_policy
    assert policy.max_attempts == 4
    assert [d.ToMilliseconds() for d in policy.customized_backoff.next] == [1000, 2000]
    assert not settings.metric.on


def test_a_consumer_without_a_group_config_gets_rocketmqs_defaults() -> None:
    settings = settings_reply(consumer_settings()).settings
    assert not settings.subscription.fifo
    assert settings.backoff_policy.max_attempts == 17
    delays = [d.ToMilliseconds() for d in settings.backoff_policy.customized_backoff.next]
    assert delays == list(DEFAULT_RETRY_DELAYS_MS) and delays[0] == 1000 and delays[-1] == 7_200_000


def test_settings_without_publishing_or_subscription_are_refused() -> None:
    with pytest.raises(GrpcRefusal) as caught:
        settings_reply(pb.Settings(client_type=pb.PRODUCER))
    assert caught.value.status_code == Code.BAD_REQUEST
