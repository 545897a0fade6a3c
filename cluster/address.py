"""The ``--cluster`` address: ``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...][/chroot]``.

One pure parser, so the CLI, the tests and the ZooKeeper adapter agree on what a valid value
is. Without a chroot the cluster lives under :data:`DEFAULT_CHROOT`, so one ZooKeeper
ensemble can hold several sparkmq clusters (and Spark's own ``/spark``) side by side.

``USER:PASSWORD@`` (or ``--zk-auth-file``) is the broker's ZooKeeper **digest** identity: the
session authenticates with it and every node sparkmq creates carries a digest ACL for it only
(docs/security.md). The password never appears in ``str()`` or ``repr()`` of an address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from cluster.errors import InvalidClusterAddress

SCHEME = "zk://"
DEFAULT_CHROOT = "/sparkmq"
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])$")
_CHROOT_PART = re.compile(r"^[A-Za-z0-9_.-]+$")


_DIGEST_USER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ZkDigest:
    """A ZooKeeper digest identity (scheme ``digest``): ``user`` and its password."""

    user: str
    password: str = field(repr=False)

    @property
    def auth_data(self) -> str:
        """What a session sends to authenticate (``user:password``): a secret, never log it."""
        return f"{self.user}:{self.password}"


def parse_digest(text: str, where: str) -> ZkDigest:
    """``USER:PASSWORD`` -> :class:`ZkDigest`; :class:`InvalidClusterAddress` names ``where``
    and what is wrong, never the password."""
    user, colon, password = text.strip().partition(":")
    if not colon or _DIGEST_USER.match(user) is None:
        raise InvalidClusterAddress(f"{where}: expected USER:PASSWORD (USER: letters, digits, '_', '-', '.')")
    if len(password) < 8 or any(ord(ch) < 0x21 for ch in password):
        raise InvalidClusterAddress(f"{where}: the password must be >= 8 printable characters, no spaces")
    return ZkDigest(user, password)


@dataclass(frozen=True, slots=True)
class ZkAddress:
    """A parsed ``--cluster`` value: the ensemble's servers, the cluster's root path and the
    optional digest identity (``None``: nodes are created world-writable, as before)."""

    servers: tuple[tuple[str, int], ...]
    chroot: str
    digest: ZkDigest | None = None

    @property
    def hosts(self) -> str:
        """kazoo's ``hosts`` string: ``h1:p1,h2:p2`` (the chroot is applied by the adapter)."""
        return ",".join(f"{host}:{port}" for host, port in self.servers)

    def __str__(self) -> str:
        user = f"{self.digest.user}:***@" if self.digest is not None else ""
        return f"{SCHEME}{user}{self.hosts}{self.chroot}"

    def with_digest(self, digest: ZkDigest | None) -> ZkAddress:
        return ZkAddress(self.servers, self.chroot, digest)


def parse_cluster_address(value: str) -> ZkAddress:
    """Parse ``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT][/chroot]``; raise
    :class:`InvalidClusterAddress` saying what is wrong (scheme, a server without a port, a bad
    port, a bad chroot, a bad credential). Messages never quote the password."""
    digest: ZkDigest | None = None
    if "@" in value:
        head, _, tail = value.rpartition("@")
        if not head.startswith(SCHEME):
            raise InvalidClusterAddress("--cluster: expected zk://USER:PASSWORD@HOST:PORT[/chroot]")
        digest = parse_digest(head[len(SCHEME) :], "--cluster credentials")
        value = SCHEME + tail
    if not value.startswith(SCHEME):
        raise InvalidClusterAddress(
            f"--cluster {value!r}: expected zk://HOST:PORT[,HOST:PORT][/chroot], e.g. zk://127.0.0.1:2181"
        )
    return _parse_plain(value).with_digest(digest)


def _parse_plain(value: str) -> ZkAddress:
    rest = value[len(SCHEME) :]
    servers_part, slash, chroot_part = rest.partition("/")
    if not servers_part:
        raise InvalidClusterAddress(f"--cluster {value!r}: no ZooKeeper server given")
    servers = tuple(_parse_server(value, item) for item in servers_part.split(","))
    chroot = DEFAULT_CHROOT
    if slash:
        parts = [part for part in chroot_part.split("/") if part]
        if not parts or chroot_part.endswith("/") or "//" in chroot_part:
            raise InvalidClusterAddress(f"--cluster {value!r}: chroot {'/' + chroot_part!r} is not a path")
        for part in parts:
            if _CHROOT_PART.match(part) is None or part in (".", ".."):
                raise InvalidClusterAddress(
                    f"--cluster {value!r}: chroot part {part!r} may only hold letters, digits, '_', '-', '.'"
                )
        chroot = "/" + "/".join(parts)
    return ZkAddress(servers=servers, chroot=chroot)


def _parse_server(value: str, item: str) -> tuple[str, int]:
    host, colon, port_text = item.rpartition(":")
    if not colon or not host:
        raise InvalidClusterAddress(f"--cluster {value!r}: server {item!r} needs HOST:PORT")
    if _HOST.match(host) is None:
        raise InvalidClusterAddress(f"--cluster {value!r}: {host!r} is not a host name or address")
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidClusterAddress(f"--cluster {value!r}: port {port_text!r} of {host} is not in 1..65535")
    return host, int(port_text)
