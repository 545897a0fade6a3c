"""Loopback ports for servers the tests start.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range every
outgoing connection's local port comes from. Between finding such a port free and the broker
process binding it, a client socket of any test (or of the other pytest-xdist worker) may take
it, and the broker fails with "address already in use". So the ports handed out here lie below
the ephemeral range, where no connection lands by chance, and each xdist worker has a slice of
its own, so two workers never hand out the same port. Successive calls are 10 ports apart: a
caller may use the few ports above the one it got (``sparkmq cluster local --port P`` puts its
brokers on P, P + 1, ...), and the next call's port is not among them.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

_LOWEST = 10_000
_SLICES = 8  # worker slices (gw0 .. gw7); more workers share slices modulo this
_STRIDE = 10


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    top = max(_ephemeral_floor(), _LOWEST + _SLICES * 100)
    width = (top - _LOWEST) // _SLICES
    start = _LOWEST + (index % _SLICES) * width
    return range(start, start + width)


def _cycle() -> tuple[int, itertools.cycle[int]]:
    """How many ports this worker has, and their endless round from a random start."""
    ports = list(_worker_slice())[::_STRIDE]
    offset = random.randrange(len(ports))  # a rerun in the same minute starts elsewhere
    return len(ports), itertools.cycle(ports[offset:] + ports[:offset])


_port_count, _next_ports = _cycle()


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1, free a moment ago and handed out once per slice cycle."""
    for _ in range(_port_count):
        port = next(_next_ports)
        if _bindable(port):
            return port
    raise RuntimeError("no free loopback port below the ephemeral range")
