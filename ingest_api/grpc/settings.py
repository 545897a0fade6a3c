"""The Telemetry settings exchange: a client's ``Settings`` in, the server's reply out.

A client opens the Telemetry stream and writes its ``Settings`` (client type, access point,
``publishing{topics}`` or ``subscription{group, subscriptions}``). The server answers on the same
stream with ``TelemetryCommand{status: OK, settings}``, built as the proxy's
``GrpcClientSettingsManager`` does: start from the client's settings, then

* a producer: ``backoff_policy{max_attempts 3, exponential_backoff{10 ms, 1 s, x2}}`` and
  ``publishing{validate_message_type, max_body_size}`` - the Python producer reads
  ``max_body_size`` unconditionally, so a reply without it makes every send fail (pitfall 1);
* a consumer: the default consumer settings under the client's, then
  ``subscription{receive_batch_size 32, long_polling_timeout 20 s, fifo = the group is
  orderly}`` and ``backoff_policy{max_attempts = the group's retries + 1,
  customized_backoff{next = its retry delays}}`` (RocketMQ's default group policy: 16 retries
  on the delay-level ladder 1 s ... 2 h);
* always ``metric{on: false}``.

Settings with neither publishing nor subscription are refused (the proxy answers the stream
with INVALID_ARGUMENT). Pure functions over protobuf values.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.duration_pb2 import Duration

from ingest_api.grpc.status import Code, GrpcRefusal, ok
from ingest_api.grpc.v2 import definition_pb2 as pb
from ingest_api.grpc.v2 import service_pb2 as spb
from store import DEFAULT_DELAY_LEVELS, DEFAULT_MAX_RECONSUME_TIMES, MIB, parse_delay_levels

#: RocketMQ's default ``CustomizedRetryPolicy``: the delay-level ladder, in ms.
DEFAULT_RETRY_DELAYS_MS: tuple[int, ...] = parse_delay_levels(DEFAULT_DELAY_LEVELS)


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What the broker knows of a consumer group (RocketMQ ``SubscriptionGroupConfig``)."""

    #: Messages of one message group are handed out in order (``consumeMessageOrderly``).
    fifo: bool = False
    #: Retries before the DLQ (``retryMaxTimes``): a client gets ``max_attempts = retries + 1``.
    max_retries: int = DEFAULT_MAX_RECONSUME_TIMES
    #: Back-off before each retry, ms (a customized policy; one entry per attempt).
    retry_delays_ms: tuple[int, ...] = DEFAULT_RETRY_DELAYS_MS


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The server-owned values of a settings reply (the proxy's ``ProxyConfig`` defaults)."""

    #: Largest body a producer may send (the store's ``max_message_size_bytes``).
    max_body_bytes: int = 4 * MIB
    #: Producers check a message's type against the queue's ``accept_message_types``.
    validate_message_type: bool = True
    producer_max_attempts: int = 3
    producer_backoff_initial_ms: int = 10
    producer_backoff_max_ms: int = 1000
    producer_backoff_multiplier: float = 2.0
    receive_batch_size: int = 32
    long_polling_timeout_ms: int = 20_000
    default_group: GroupPolicy = field(default_factory=GroupPolicy)


def settings_reply(
    client: pb.Settings, group: GroupPolicy | None = None, server: ServerSettings | None = None
) -> spb.TelemetryCommand:
    """``TelemetryCommand{status OK, settings}`` answering ``client``'s settings.

    ``group`` is the consumer group's policy (``server.default_group`` when the broker has
    none); producers ignore it. Raises :class:`GrpcRefusal` (``BAD_REQUEST``) for settings with
    neither publishing nor subscription.
    """
    return spb.TelemetryCommand(status=ok(), settings=merged_settings(client, group, server))


def merged_settings(
    client: pb.Settings, group: GroupPolicy | None = None, server: ServerSettings | None = None
) -> pb.Settings:
    """The client's settings with the server-owned fields filled in (see the module doc)."""
    server = server or ServerSettings()
    kind = client.WhichOneof("pub_sub")
    if kind == "publishing":
        merged = _producer_settings(client, server)
    elif kind == "subscription":
        merged = _consumer_settings(client, group or server.default_group, server)
    else:
        raise GrpcRefusal(Code.BAD_REQUEST, "there is no publishing or subscription data in settings")
    merged.metric.CopyFrom(pb.Metric(on=False))
    return merged


def _producer_settings(client: pb.Settings, server: ServerSettings) -> pb.Settings:
    merged = pb.Settings()
    merged.CopyFrom(client)
    merged.backoff_policy.max_attempts = server.producer_max_attempts
    merged.backoff_policy.exponential_backoff.CopyFrom(
        pb.ExponentialBackoff(
            initial=_duration(server.producer_backoff_initial_ms),
            max=_duration(server.producer_backoff_max_ms),
            multiplier=server.producer_backoff_multiplier,
        )
    )
    merged.publishing.validate_message_type = server.validate_message_type
    merged.publishing.max_body_size = server.max_body_bytes
    return merged


def _consumer_settings(client: pb.Settings, group: GroupPolicy, server: ServerSettings) -> pb.Settings:
    # The proxy stores the default consumer settings merged *from* the client's (the client's
    # fields win), then overlays the group's config when it answers.
    merged = _with_group(pb.Settings(), server.default_group, server)
    merged.MergeFrom(client)
    return _with_group(merged, group, server)


def _with_group(settings: pb.Settings, group: GroupPolicy, server: ServerSettings) -> pb.Settings:
    merged = pb.Settings()
    merged.CopyFrom(settings)
    merged.subscription.receive_batch_size = server.receive_batch_size
    merged.subscription.long_polling_timeout.CopyFrom(_duration(server.long_polling_timeout_ms))
    merged.subscription.fifo = group.fifo
    merged.backoff_policy.max_attempts = group.max_retries + 1
    merged.backoff_policy.customized_backoff.CopyFrom(
        pb.CustomizedBackoff(next=[_duration(ms) for ms in group.retry_delays_ms])
    )
    return merged


def _duration(ms: int) -> Duration:
    span = Duration()
    span.FromMilliseconds(ms)
    return span
