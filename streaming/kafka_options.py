"""Spark Kafka options that sparkmq cannot honour, and why; and the Kafka address option.

A job moved from ``format("kafka")`` keeps most of its options (``streaming.options`` gives
them Kafka's meaning). The rest fall in two kinds, both refused at ``load()`` with a message
that says why and what to do instead, so that nothing is silently ignored:

* options naming machinery sparkmq does not have (a Kafka consumer group, Kafka's security
  protocols, serializers, interceptors);
* every other ``kafka.*`` setting: Spark passes those to its Kafka consumer or producer, and
  sparkmq runs none (it reads and writes over the broker's HTTP API or a store directory).

``kafka.bootstrap.servers`` is the exception: it may name brokers' HTTP addresses (a list too)
and then means ``endpoint`` (:func:`bootstrap_endpoint`; :mod:`streaming.bootstrap` checks at
``load()`` that the address answers HTTP, so a Kafka port is reported as such).

Pure: names and strings in, strings out.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster import InvalidBootstrapAddress, parse_bootstrap
from store import InvalidArgument, parse_duration_ms
from streaming.http_access import ACCESS_OPTIONS

BOOTSTRAP_SERVERS = "kafka.bootstrap.servers"

_NO_GROUP = (
    "sparkmq reads no Kafka consumer group: the query's checkpoint holds its offsets. Use the "
    "option 'group' to mirror the query's progress into the broker's offsetTable, so that "
    "GET /groups/{group}/lag and Kafka tools see its lag"
)
_NO_SECURITY = (
    "sparkmq speaks HTTP to its broker, not the Kafka protocol: kafka.security.protocol, "
    "kafka.sasl.mechanism and kafka.sasl.jaas.config are mapped onto HTTP credentials, and "
    "kafka.ssl.truststore.location (type PEM) onto 'tlsCa'; other kafka.ssl.* settings cannot apply"
)
_NO_CONSUMER = (
    "Spark hands kafka.* settings to a Kafka consumer or producer and sparkmq runs none (it reads "
    "and writes over the broker's HTTP API or a store directory), so this setting cannot apply"
)

#: Exact option names (lower case) -> why they are refused, for the source.
_SOURCE_REFUSED: Mapping[str, str] = {
    "kafka.group.id": _NO_GROUP,
    "groupidprefix": _NO_GROUP,
    "kafka.auto.offset.reset": "use 'startingOffsets' ('earliest' or 'latest'): the query, not a "
    "consumer, decides where to start (Spark's Kafka source refuses it too)",
    "kafka.key.deserializer": "keys are always binary; cast them in the DataFrame "
    "(Spark's Kafka source refuses it too)",
    "kafka.value.deserializer": "values are always binary; cast them in the DataFrame "
    "(Spark's Kafka source refuses it too)",
    "kafka.enable.auto.commit": "no consumer commits offsets: the checkpoint is the truth; "
    "'group' mirrors progress into the broker",
    "kafka.interceptor.classes": "no Kafka consumer runs, so there is nothing to intercept",
    "kafka.request.timeout.ms": "use 'requestTimeoutMs' (the HTTP timeout to the broker)",
}

#: Exact option names (lower case) -> why they are refused, for the sink.
_SINK_REFUSED: Mapping[str, str] = {
    "kafka.key.serializer": "keys are written as given (binary or string); Spark's Kafka sink refuses it too",
    "kafka.value.serializer": "values are written as given (binary or string); "
    "Spark's Kafka sink refuses it too",
    "kafka.partitioner.class": "a row goes to its 'partition' column, else to the queue its "
    "key hashes to (abs(javaHash(key)) % queues), else round robin",
    "kafka.transactional.id": "the sparkmq sink is exactly-once by itself (staged parts "
    "published once per micro-batch, docs/exactly_once.md)",
    "kafka.enable.idempotence": "the sparkmq sink is exactly-once by itself (docs/exactly_once.md)",
    "kafka.acks": "a micro-batch is acknowledged once the broker has published it durably",
    "kafka.request.timeout.ms": "use 'requestTimeoutMs' (the HTTP timeout to the broker)",
}

#: Option name prefixes (lower case) -> why they are refused, for both directions.
_REFUSED_PREFIXES = (("kafka.sasl.", _NO_SECURITY), ("kafka.ssl.", _NO_SECURITY))
# (kafka.security.protocol, kafka.sasl.mechanism/jaas.config and the PEM truststore are mapped:
# streaming.http_access.ACCESS_OPTIONS)


def source_refusal(name: str) -> str | None:
    """Why the source refuses option ``name`` (lower case), or ``None`` if it is not a Kafka
    option sparkmq refuses."""
    return _refusal(name, _SOURCE_REFUSED)


def sink_refusal(name: str) -> str | None:
    """Why the sink refuses option ``name`` (lower case), or ``None``."""
    return _refusal(name, _SINK_REFUSED)


def _refusal(name: str, table: Mapping[str, str]) -> str | None:
    if name == BOOTSTRAP_SERVERS or name in ACCESS_OPTIONS:
        return None
    if name in table:
        return table[name]
    for prefix, reason in _REFUSED_PREFIXES:
        if name.startswith(prefix):
            return reason
    if name.startswith("kafka."):
        return _NO_CONSUMER
    return None


def bootstrap_endpoint(raw: str) -> str:
    """The broker URLs that ``kafka.bootstrap.servers`` names, as an ``endpoint`` bootstrap
    list: each ``host:port`` becomes ``http://host:port``; an ``http(s)://`` URL stays as it
    is; several, comma-separated, are tried in order (``"a:8081,b:8082"``).

    Raises :class:`InvalidArgument` for something that is not an address; the message is the
    reason only (the caller names the option).
    """
    try:
        return ",".join(parse_bootstrap(raw, bare_host_port=True))
    except InvalidBootstrapAddress as exc:
        raise InvalidArgument(str(exc)) from None


def trigger_delay_ms(raw: str) -> int:
    """``maxTriggerDelay`` as Spark reads it: a whole number with a unit (``15m``, ``30s``,
    ``500ms``, ``2h``, ``1d``; ``min`` for minutes too), or plain milliseconds.

    Raises :class:`InvalidArgument` (reason only)."""
    text = raw.strip().lower().replace("min", "m")
    if text.isdigit():
        return int(text)
    return parse_duration_ms(text)
