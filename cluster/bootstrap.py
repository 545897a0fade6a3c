"""Bootstrap addresses, and the brokers a client has learnt: one home for every sparkmq client.

Like Kafka's ``bootstrap.servers``, a client is given one or more broker addresses
(:func:`parse_bootstrap`: ``"http://a:8081,http://b:8082"`` or a sequence of them); any one
broker of a cluster is enough, the rest are learnt from the answers. A client must not depend
on the address it was given staying alive: a replica group's master killed with ``kill -9`` is
replaced by a slave within about a second, at another address. So :class:`KnownBrokers`
remembers, for the life of the client, every HTTP address it has seen in ``GET /cluster``
(each broker's address and every member of its replica group) and in ``GET /topics/{t}/route``
(each queue's owner and its group's live members, ``replicas``), and offers them when the
configured address does not answer.

Which address to ask first (:meth:`KnownBrokers.candidates`):

1. the address that answered last;
2. the bootstrap addresses, in the order given;
3. the learnt ones, in the order they were first seen;

and an address that could not be reached within the last ``suspect_s`` seconds goes after all
of these (still tried: it may be the only one left). Nothing is ever forgotten: a dead master
comes back as a slave at the same address.

Pure and thread-safe; no I/O. The Python client (``sparkmq.client.directory``), the Spark
source and sink (``streaming``) and the operator job use it, so they fail over the same way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from cluster.errors import ClusterError

#: How long an address that could not be reached is asked last, seconds.
DEFAULT_SUSPECT_S = 3.0


class InvalidBootstrapAddress(ClusterError, ValueError):
    """A bootstrap list that is empty or holds something other than an http(s) broker URL."""

    code = "invalid_bootstrap_address"


def parse_bootstrap(value: str | Sequence[str], *, bare_host_port: bool = False) -> tuple[str, ...]:
    """Broker base URLs from ``"http://a:8080,http://b:8080"`` or a sequence of them, in order,
    without duplicates or trailing slashes.

    ``bare_host_port``: ``host:port`` means ``http://host:port`` (``kafka.bootstrap.servers``).
    Raises :class:`InvalidBootstrapAddress` naming the first bad entry, or when none is given."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    urls = [_one_url(p, bare_host_port) for p in (str(p).strip() for p in parts) if p]
    if not urls:
        raise InvalidBootstrapAddress("give at least one broker address, e.g. http://127.0.0.1:8080")
    return tuple(dict.fromkeys(urls))


def _one_url(text: str, bare_host_port: bool) -> str:
    url = text
    if bare_host_port and "://" not in text:
        host, sep, port = text.rpartition(":")
        if not sep or not host or not port.isdigit() or "/" in text:
            raise InvalidBootstrapAddress(f"expected a broker's HTTP address as host:port, got {text!r}")
        url = f"http://{text}"
    parsed = urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise InvalidBootstrapAddress(
            f"a broker address must be an http(s) URL like http://127.0.0.1:8080, got {text!r}"
        )
    return url.rstrip("/")


def _http(value: Any) -> list[str]:
    return [value.rstrip("/")] if isinstance(value, str) and value else []


def learned_addresses(document: Mapping[str, Any]) -> list[str]:
    """Every broker HTTP address in a ``GET /cluster`` or ``GET /topics/{t}/route`` answer:
    the brokers' addresses and their replica members' (``/cluster``), each queue's owner and its
    group's live members (a route). A lone broker's answer (``mode: single``) names none: it may
    advertise an address only it can reach, and the client reaches it at the URL it asked."""
    if document.get("mode") == "single":
        return []
    found: list[str] = []
    for broker in document.get("brokers") or ():
        found += _http(broker.get("http"))
        for member in broker.get("members") or ():
            found += _http(member.get("http"))
    for queue in document.get("queues") or ():
        found += _http(queue.get("http"))
        for replica in queue.get("replicas") or ():
            found += _http(replica)
    return list(dict.fromkeys(found))


def no_broker_answered(failures: Sequence[tuple[str, str]]) -> str:
    """The message of a call no address answered: every address tried, each with its problem."""
    tried = ", ".join(url for url, _ in failures) or "none"
    details = "; ".join(f"{url}: {problem}" for url, problem in failures)
    return f"no broker answered (tried {tried}): {details}"


class KnownBrokers:
    """The addresses one client may ask: its bootstrap list and every address learnt since.

    ``clock`` is injectable (seconds, monotonic)."""

    def __init__(
        self,
        bootstrap: Sequence[str],
        *,
        suspect_s: float = DEFAULT_SUSPECT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self._suspect_s = suspect_s
        self._clock = clock
        self._lock = threading.Lock()
        self._learnt: dict[str, None] = {}
        self._suspects: dict[str, float] = {}
        self._last_good: str | None = None

    @property
    def learnt(self) -> tuple[str, ...]:
        """Addresses learnt from answers that are not bootstrap addresses, first seen first."""
        with self._lock:
            return tuple(url for url in self._learnt if url not in self.bootstrap)

    @property
    def last_good(self) -> str | None:
        return self._last_good

    def learn(self, urls: Iterable[str]) -> None:
        """Remember ``urls`` (base URLs); already known ones keep their place."""
        with self._lock:
            for url in urls:
                self._learnt.setdefault(url.rstrip("/"), None)

    def learn_from(self, document: Mapping[str, Any]) -> None:
        """Remember every address in a ``/cluster`` or route answer (:func:`learned_addresses`)."""
        self.learn(learned_addresses(document))

    def answered(self, url: str) -> None:
        """``url`` answered: ask it first from now on, and stop suspecting it."""
        with self._lock:
            self._last_good = url
            self._suspects.pop(url, None)

    def unreachable(self, url: str) -> None:
        """``url`` could not be reached: ask it last for ``suspect_s``."""
        with self._lock:
            self._suspects[url] = self._clock() + self._suspect_s
            if self._last_good == url:
                self._last_good = None

    def candidates(self) -> list[str]:
        """Every known address, best first (see the module docstring)."""
        now = self._clock()
        with self._lock:
            first = [self._last_good] if self._last_good else []
            ordered = list(dict.fromkeys([*first, *self.bootstrap, *self._learnt]))
            suspected = {url for url, until in self._suspects.items() if until > now}
        return [u for u in ordered if u not in suspected] + [u for u in ordered if u in suspected]

    def best(self) -> str:
        """The address to ask first."""
        return self.candidates()[0]
