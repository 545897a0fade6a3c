"""A TCP proxy the test controls, to cut one link of a cluster as a network partition would.

Put it between one process and another (a broker and ZooKeeper, a slave and its master's HA
port) and give that process the proxy's address instead of the real one:

    with TcpProxy(("127.0.0.1", zk_port)) as proxy:
        ...  # the broker runs with --cluster zk://127.0.0.1:{proxy.port}/chroot
        proxy.cut()              # a black hole: nothing crosses, nothing is closed
        proxy.heal()             # bytes flow again
        proxy.cut(drop=True)     # every connection reset at once, new ones reset on accept

**The black hole** (the default) is what a real partition looks like to both ends: the
connections stay open, bytes sent are neither delivered nor refused, and only the ends' own
timeouts notice (for ZooKeeper: the client's read timeout suspends the connection, the server
expires the session; it is never *closed*, which would end the session at once). New
connections are accepted by the kernel, as a SYN that is never answered looks like a slow
peer: the proxy holds them and connects them upstream only once healed. Bytes a pump had read
when the cut came are delivered after the heal, as TCP's retransmission would.

**Drop** closes both sides of every connection with a reset (``SO_LINGER`` 0) and resets every
new one until healed: a peer that rebooted, or a firewall that answers with RST.

**A slow link** (``rate_bytes_per_s``) paces each direction to that many bytes a second: a
catch-up the test wants to interrupt half-way stays half-way long enough to be cut.

Threads: one accept thread, one thread per direction of each connection (polling its socket
every 0.1 s so a cut or a close is seen promptly). Everything is on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
import time
from types import TracebackType

#: How often a waiting pump looks again at the cut and the closed flag (seconds).
POLL_S = 0.1
#: Largest read of one pump (bytes).
CHUNK_BYTES = 65536
#: ``struct linger {int l_onoff; int l_linger;}`` = ``(1, 0)``: ``close()`` sends a RST.
_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP reset (no FIN, no lingering)."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    sock.close()


class _Link:
    """One proxied connection: the accepted client socket and its upstream socket."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.upstream: socket.socket | None = None
        self.closed = False
        self._lock = threading.Lock()

    def close(self, *, reset: bool = False) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            if reset:
                _reset(sock)
            else:
                sock.close()


class TcpProxy:
    """Forwards every connection made to ``127.0.0.1:port`` to ``target`` until cut.

    ``target`` may be set after construction (before the first connection arrives), for a
    process whose port is chosen after the proxy's. :meth:`close` ends everything; the proxy is
    also a context manager. ``accepted`` counts the connections taken since the start."""

    def __init__(self, target: tuple[str, int] | None = None, *, rate_bytes_per_s: int | None = None) -> None:
        self.target = target
        self._chunk = (
            CHUNK_BYTES if rate_bytes_per_s is None else max(1, min(CHUNK_BYTES, rate_bytes_per_s // 50))
        )
        self._rate = rate_bytes_per_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._dropping = False
        self._closed = False
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True)

    @property
    def address(self) -> str:
        """``127.0.0.1:port``, the address to give the process in front of which it stands."""
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return not self._flowing.is_set()

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- control ----------------------------------------------------------------------------

    def cut(self, *, drop: bool = False) -> None:
        """Stop forwarding. ``drop=False``: a black hole (connections stay open, bytes wait);
        ``drop=True``: reset every connection now and every new one until :meth:`heal`."""
        self._flowing.clear()
        if drop:
            self._dropping = True
            with self._lock:
                links = list(self._links)
            for link in links:
                link.close(reset=True)

    def heal(self) -> None:
        """Forward again: held connections connect upstream, held bytes are delivered."""
        self._dropping = False
        self._flowing.set()

    def close(self) -> None:
        """Stop listening and close every connection (idempotent)."""
        self._closed = True
        self._flowing.set()  # wake every waiting pump: each sees the flag and leaves
        self._server.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()

    # -- threads -----------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            if self._dropping:
                _reset(client)
                continue
            link = _Link(client)
            with self._lock:
                self._links.add(link)
            threading.Thread(target=self._connect, args=(link,), daemon=True).start()

    def _wait_flowing(self, link: _Link) -> bool:
        """Block while cut; False once the link or the proxy is closed."""
        while not self._flowing.wait(POLL_S):
            if link.closed or self._closed:
                return False
        return not (link.closed or self._closed)

    def _connect(self, link: _Link) -> None:
        """Connect ``link`` upstream once the proxy forwards, then pump both ways."""
        if not self._wait_flowing(link) or self.target is None:
            self._forget(link)
            return
        try:
            link.upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            self._forget(link, reset=True)  # what the client would see without the proxy
            return
        link.upstream.settimeout(None)
        back = threading.Thread(target=self._pump, args=(link, link.upstream, link.client), daemon=True)
        back.start()
        self._pump(link, link.client, link.upstream)

    def _pump(self, link: _Link, source: socket.socket, sink: socket.socket) -> None:
        """Copy ``source`` to ``sink`` while flowing; hold (neither read nor write) while cut."""
        try:
            while self._wait_flowing(link):
                ready, _, _ = select.select([source], [], [], POLL_S)
                if not ready:
                    continue
                data = source.recv(self._chunk)
                if not data:
                    break
                if not self._wait_flowing(link):
                    return
                sink.sendall(data)
                if self._rate is not None:
                    time.sleep(len(data) / self._rate)
        except (OSError, ValueError):  # the other pump or a cut closed the sockets
            pass
        finally:
            self._forget(link)

    def _forget(self, link: _Link, *, reset: bool = False) -> None:
        link.close(reset=reset)
        with self._lock:
            self._links.discard(link)
