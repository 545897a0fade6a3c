"""One slave's connection on the master (RocketMQ ``AutoSwitchHAConnection``): two threads.

The reader takes the slave's 16-byte handshake, then its 12-byte acks (``HAServerReader``,
``AutoSwitchHAConnection.java`` lines 304-374). The writer answers the handshake with the
master's epoch entries, waits for the first ack (where the slave's log ends after its
truncation) and streams transfer frames from there (``WriteSocketService``, lines 377-441,
``transferToSlave`` lines 564-623, ``run`` lines 625-707):

* a first ack of 0 means a new replica: start at the master's first CommitLog file, or at its
  last file with ``isSyncFromLastFile``;
* a frame's body lies within one CommitLog file and one epoch: it stops at the next epoch's
  start, and carries that epoch and its start offset;
* when there is nothing to send the writer sleeps until the next append (woken, not polling),
  a confirm offset move (sent at once in an empty frame, so slaves' readers follow quickly)
  or the heartbeat interval.

Either thread's failure closes the socket, which ends the other; the session then forgets the
slave. The failure is recorded in the session's status (never only logged).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Protocol

from store.ha.epoch_file import EpochEntry, entry_for_offset
from store.ha.errors import HAProtocolError, SlaveTooFarBehind
from store.ha.frames import (
    SLAVE_HANDSHAKE,
    SlaveAck,
    SlaveHandshake,
    TransferHeader,
    decode_slave_frame,
    encode_master_handshake,
    encode_transfer_header,
)
from store.ha.tls import IdentityCheck, PeerRefused, check_peer, peer_identity
from store.ha.tls_channel import TlsChannel
from store.ha.wire import Buffer, ConnectionClosed, close_quietly, send_all

if TYPE_CHECKING:
    from store.ha.config import HAConfig
    from store.write.replica_log import ReplicaLog

log = logging.getLogger("sparkmq.ha")


class MasterSessionPort(Protocol):
    """What a connection needs of the master's session (:class:`store.ha.master.MasterSession`
    provides it): declared here so that this module does not import the session's, which
    creates the connections."""

    log: ReplicaLog
    config: HAConfig
    #: Bumped on every append and confirm move.
    generation: int
    #: The end of what the put path has dispatched: nothing past it is sent.
    appended_end: int
    #: Mutual TLS (``config.tls``): the server context and who may replicate as which member.
    tls_context: ssl.SSLContext | None
    identity_check: IdentityCheck | None

    @property
    def confirm_offset(self) -> int: ...
    def register(self, connection: SlaveConnection) -> None: ...
    def unregister(self, connection: SlaveConnection, reason: str) -> None: ...
    def on_ack(self, connection: SlaveConnection, ack_offset: int) -> None: ...
    def transferred(self, connection: SlaveConnection) -> None: ...
    def epoch_entries(self) -> tuple[EpochEntry, ...]: ...
    def record_error(self, message: str) -> None: ...
    def wait_for_change(self, generation: int, timeout_s: float) -> None: ...


class SlaveConnection:
    """A connected slave; :meth:`start` runs its reader and writer threads."""

    def __init__(self, session: MasterSessionPort, sock: socket.socket, address: str) -> None:
        self._session = session
        self._sock = sock
        self.address = address
        self.broker_id = -1
        self.async_learner = False
        self.sync_from_last_file = False
        #: The slave's first ack: where its log ends (-1: not yet).
        self.request_offset = -1
        #: Where the next frame starts (-1: not decided yet).
        self.transfer_offset = -1
        self._handshake = threading.Event()
        self._first_ack = threading.Event()
        self._closed = threading.Event()
        self._last_read = time.monotonic()
        self._threads: list[threading.Thread] = []
        #: The verified certificate's identity (mutual TLS), '' on plain TCP.
        self.identity = ""
        #: Mutual TLS over ``_sock``, once the handshake is done (None: plain TCP).
        self._tls: TlsChannel | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        for name, target in (("reader", self._read_loop), ("writer", self._write_loop)):
            thread = threading.Thread(target=target, name=f"sparkmq-ha-{name}-{self.address}", daemon=True)
            thread.start()
            self._threads.append(thread)  # started: a concurrent join() may wait for it

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self, reason: str) -> None:
        """Close the socket (both threads end); idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._handshake.set()
        self._first_ack.set()
        close_quietly(self._sock)
        self._session.unregister(self, reason)

    def join(self, timeout_s: float) -> None:
        for thread in list(self._threads):
            if thread is not threading.current_thread() and thread.ident is not None:
                thread.join(timeout_s)

    # --- reader ---------------------------------------------------------------------------
    def _read_loop(self) -> None:
        config = self._session.config
        idle_s = config.housekeeping_interval_ms / 1000
        pending = bytearray()
        chunk = bytearray(64 * SLAVE_HANDSHAKE.size)
        view = memoryview(chunk)
        try:
            self._secure()
            while not self._closed.is_set():
                try:
                    got = (self._sock if self._tls is None else self._tls).recv_into(view)
                except TimeoutError:
                    if time.monotonic() - self._last_read > idle_s:
                        raise ConnectionClosed(f"no ack from the slave for {idle_s:.1f} s") from None
                    continue
                if got == 0:
                    raise ConnectionClosed("the slave closed the connection")
                self._last_read = time.monotonic()
                pending += view[:got]
                pending = self._frames(pending)
        except (OSError, ConnectionClosed, HAProtocolError, PeerRefused) as exc:
            self._fail(exc)

    def _secure(self) -> None:
        """With mutual TLS, run the handshake here (not in the accept loop), bounded; an
        ``ssl.SSLError`` (no certificate, another CA, expired) ends the connection."""
        context = self._session.tls_context
        tls = self._session.config.tls
        if context is None or tls is None:
            return
        self._tls = TlsChannel.accept(self._sock, context, tls.handshake_timeout_s)
        self.identity = peer_identity(self._tls.ssl_object)

    def _send(self, buffers: list[Buffer]) -> None:
        """Send every buffer, through TLS when the connection has it (see :mod:`tls_channel`)."""
        if self._tls is None:
            send_all(self._sock, buffers)
        else:
            self._tls.sendall(buffers)

    def _frames(self, pending: bytearray) -> bytearray:
        position = 0
        while (decoded := decode_slave_frame(pending, position)) is not None:
            frame, size = decoded
            position += size
            if isinstance(frame, SlaveHandshake):
                if self._session.tls_context is not None:
                    check_peer(self.identity, frame.slave_broker_id, self._session.identity_check)
                self.broker_id = frame.slave_broker_id
                self.async_learner = frame.async_learner
                self.sync_from_last_file = frame.sync_from_last_file
                self._session.register(self)
                self._handshake.set()
            elif isinstance(frame, SlaveAck):
                if not self._handshake.is_set():
                    raise HAProtocolError("the slave acked before its handshake")
                if self.request_offset < 0:
                    self.request_offset = frame.max_offset
                    self._first_ack.set()
                self._session.on_ack(self, frame.max_offset)
        return pending[position:]

    # --- writer ---------------------------------------------------------------------------
    def _write_loop(self) -> None:
        session = self._session
        idle_s = session.config.housekeeping_interval_ms / 1000
        try:
            if not self._handshake.wait(idle_s) or self._closed.is_set():
                raise ConnectionClosed("no handshake from the slave")
            entries = session.epoch_entries()
            last_epoch = entries[-1].epoch if entries else -1
            self._send([encode_master_handshake(session.log.max_offset, last_epoch, entries)])
            if not self._first_ack.wait(idle_s) or self._closed.is_set():
                raise ConnectionClosed("no first ack from the slave")
            self.transfer_offset = self._start_offset()
            log.info(
                "slave %d (%s) replicates from offset %d", self.broker_id, self.address, self.transfer_offset
            )
            self._transfer(entries)
        except (OSError, ConnectionClosed, HAProtocolError, SlaveTooFarBehind) as exc:
            self._fail(exc)

    def _start_offset(self) -> int:
        log_ = self._session.log
        if self.request_offset == 0:
            if self.sync_from_last_file:
                return max(log_.min_offset, log_.max_offset - log_.max_offset % log_.file_size_bytes)
            return log_.min_offset
        if self.request_offset < log_.min_offset:
            raise SlaveTooFarBehind(
                f"slave {self.broker_id} needs offset {self.request_offset}, the master keeps "
                f"{log_.min_offset} and later only: wipe the slave's store to rebuild it"
            )
        if self.request_offset > log_.max_offset:
            raise HAProtocolError(
                f"slave {self.broker_id} ends at {self.request_offset}, beyond the master's "
                f"{log_.max_offset}: it must reconnect and truncate"
            )
        return self.request_offset

    def _transfer(self, entries: tuple[EpochEntry, ...]) -> None:
        session = self._session
        batch = session.config.transfer_batch_bytes
        heartbeat_s = session.config.heartbeat_interval_ms / 1000
        told_confirm, idle_since = -1, time.monotonic()
        while not self._closed.is_set():
            generation = session.generation
            found = entry_for_offset(entries, self.transfer_offset)
            if found is None:
                raise HAProtocolError(f"no epoch of the master covers offset {self.transfer_offset}")
            entry, next_entry = found
            limit = (
                batch if next_entry is None else min(batch, next_entry.start_offset - self.transfer_offset)
            )
            # Never past what the put path has dispatched: an append still in flight may be undone.
            limit = min(limit, session.appended_end - self.transfer_offset)
            with session.log.transfer_view(self.transfer_offset, limit) as data:
                confirm = session.confirm_offset
                if len(data):
                    header = TransferHeader(
                        len(data), self.transfer_offset, entry.epoch, entry.start_offset, confirm
                    )
                    self._send([encode_transfer_header(header), data])
                    self.transfer_offset += len(data)
                    session.transferred(self)
                    told_confirm, idle_since = confirm, time.monotonic()
                    continue
            if confirm != told_confirm or time.monotonic() - idle_since >= heartbeat_s:
                header = TransferHeader(0, self.transfer_offset, entry.epoch, entry.start_offset, confirm)
                self._send([encode_transfer_header(header)])
                told_confirm, idle_since = confirm, time.monotonic()
            session.wait_for_change(generation, heartbeat_s)

    def _fail(self, exc: BaseException) -> None:
        if not self._closed.is_set():
            self._session.record_error(
                f"slave {self.broker_id} at {self.address}: {type(exc).__name__}: {exc}"
            )
        self.close(str(exc))
