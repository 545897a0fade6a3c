"""Does ``kafka.bootstrap.servers`` name the broker's HTTP address, or a Kafka port?

A job moved from ``format("kafka")`` keeps ``kafka.bootstrap.servers``; sparkmq reads and writes
over the broker's HTTP API, so the option means ``endpoint``. The likely mistake is to leave the
Kafka port in it (sparkmq's Kafka gateway, or a real Kafka broker), which would otherwise fail
deep inside the first micro-batch with an unreadable transport error. At ``load()`` (source)
or query start (sink) one ``GET /healthz`` tells them apart:

* any HTTP answer: an HTTP server, taken as the broker;
* nothing listening (connection refused, unknown host): not judged here: the broker may start
  later, and the first planning step reports it, as with ``endpoint``;
* a connection that is closed without an HTTP answer, or that answers nothing (a Kafka broker
  reads ``GET `` as a 1.2 GB frame size and hangs up): a Kafka port, reported as such.
"""

from __future__ import annotations

from cluster import parse_bootstrap
from streaming.kafka_options import BOOTSTRAP_SERVERS
from streaming.positions import InvalidSourceOption

#: Longest wait for the probe's answer, seconds.
PROBE_TIMEOUT_S = 5.0


def bootstrap_problem(urls: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why an address of ``urls`` (from ``kafka.bootstrap.servers``: one or a comma-separated
    bootstrap list) is not a broker's HTTP address, or None."""
    for url in parse_bootstrap(urls):
        problem = _problem(url, timeout_s)
        if problem is not None:
            return problem
    return None


def _problem(url: str, timeout_s: float) -> str | None:
    import httpx  # here: the source's runner, which imports this module, never probes

    try:
        httpx.get(f"{url}/healthz", timeout=min(timeout_s, PROBE_TIMEOUT_S))
    except (httpx.ConnectError, httpx.ConnectTimeout):
        return None
    except httpx.HTTPError as exc:
        return (
            f"{url.split('://', 1)[-1]} does not answer HTTP ({type(exc).__name__}): it looks like a "
            "Kafka port (a Kafka broker, or sparkmq's Kafka gateway). sparkmq's Spark source and sink "
            "use the broker's HTTP API: give its HTTP address instead (sparkmq serve --port, 8080 by "
            "default), e.g. .option('kafka.bootstrap.servers', '127.0.0.1:8080')"
        )
    return None


def check_bootstrap_address(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise :class:`InvalidSourceOption` naming ``kafka.bootstrap.servers`` for a Kafka port."""
    problem = bootstrap_problem(url, timeout_s)
    if problem is not None:
        raise InvalidSourceOption(BOOTSTRAP_SERVERS, problem)
