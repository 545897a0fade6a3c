"""A slave's replication client (RocketMQ ``AutoSwitchHAClient``): one thread per master.

``AutoSwitchHAClient.java`` (develop @ 8fc57f14), step by step:

1. connect to the master's HA address (``connectMaster``, lines 341-357) and send the 16-byte
   handshake (``sendHandshakeHeader``, lines 290-306);
2. read the master's handshake and its epoch entries; refuse a master whose epoch is below
   the one the cluster layer named (a deposed master: :class:`StaleMaster`);
3. truncate at the consistent point (``doTruncate``, lines 432-476): an empty epoch file with an
   empty log is a new replica; otherwise :func:`find_consistent_point` must find a common
   epoch (:class:`NoConsistentPoint` if not), and the log is cut there by
   :func:`store.ha.truncation.truncate_replica`, durably, *before* the first ack reports the
   new end;
4. read transfer frames (``HAClientReader``, lines 537-574): the frame must start at the
   local end (``master pushed offset not equal the max phy offset in slave``); a frame of an
   epoch older than the newest one seen is rejected (:class:`StaleEpochFrame`); a newer epoch
   is appended to the epoch file before its bytes; bytes are appended raw
   (:meth:`ReplicaLog.append_raw`);
5. ack the local end (12 bytes; after an fsync under SYNC_FLUSH) once the frames that have
   arrived are appended, and without waiting for a pause at most :data:`ACK_MAX_DELAY_S` or
   :data:`ACK_EVERY_BYTES` after the first unacknowledged frame (SYNC producers wait for it);
   at least every heartbeat interval (``isTimeToReportOffset``);
6. dispatch the records (:meth:`ReplicaLog.dispatch_appended`, RocketMQ's reput after the
   append) when no frame follows within :data:`DISPATCH_IDLE_S` or :data:`DISPATCH_EVERY_BYTES`
   are waiting for it, and move the confirm offset to ``min(frame's confirmOffset, valid end)``.
   So a SYNC acknowledgement waits for the bytes, not for the ConsumeQueue and index work, and a
   stream of small frames is dispatched in large batches. A record that fails its check after
   the ack is removed, the connection dropped and the next handshake reports the lower end.

Any failure closes the connection; the client reconnects with a doubling back-off and records
the failure (never only logs it).
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable

from store.config import FlushDiskType
from store.errors import StoreError
from store.ha.config import HAConfig
from store.ha.epoch_file import EpochEntry, EpochFile, find_consistent_point
from store.ha.errors import HAProtocolError, NoConsistentPoint, StaleEpochFrame, StaleMaster
from store.ha.frames import (
    MASTER_HANDSHAKE,
    TRANSFER_HEADER,
    MasterHandshake,
    SlaveHandshake,
    TransferHeader,
    decode_epoch_entries,
    decode_master_handshake_header,
    decode_transfer_header,
    encode_slave_ack,
    encode_slave_handshake,
)
from store.ha.wire import POLL_S, ConnectionClosed, close_quietly, more_waiting, send_all, tune
from store.write.replica_log import ReplicaLog

log = logging.getLogger("sparkmq.ha")

#: Without a pause in the stream, ack at least after this many bytes or this long after the
#: first unacknowledged frame: SYNC producers wait for these acks.
ACK_EVERY_BYTES = 1 << 20
ACK_MAX_DELAY_S = 0.001
#: Dispatch appended records once the stream pauses this long (seconds) ...
DISPATCH_IDLE_S = 0.002
#: ... or once this many appended bytes wait for dispatch.
DISPATCH_EVERY_BYTES = 4 << 20

Truncate = Callable[[int, str], object]


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected host:port, got {address!r}")
    return host.strip("[]"), int(port)


class HAClient:
    """Replicates from the master at ``master_address`` until :meth:`stop`."""

    def __init__(
        self,
        replica: ReplicaLog,
        epochs: EpochFile,
        config: HAConfig,
        master_address: str,
        master_epoch: int,
        *,
        truncate: Truncate,
        report: Callable[[str], None],
        rejected: Callable[[], None],
    ) -> None:
        self.log = replica
        self.config = config
        self.master_address = master_address
        self.master_epoch = master_epoch
        self._epochs = epochs
        self._truncate = truncate
        self._report = report
        self._rejected = rejected
        self._stopping = threading.Event()
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"sparkmq-ha-client-{master_address}", daemon=True
        )
        self.connected = False
        self._reported = -1
        #: The newest confirm offset the master sent.
        self._master_confirm = 0
        self._last_ack_s = 0.0
        self._unacked_bytes = 0
        self._first_unacked_s = 0.0
        self._context: ssl.SSLContext | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, wait_s: float = 60.0) -> bool:
        """Close the connection and end the thread; False when it is still running after
        ``wait_s`` (stuck in a long truncation or a blocked write)."""
        self._stopping.set()
        sock = self._sock
        if sock is not None:
            close_quietly(sock)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait_s)
        return not self._thread.is_alive()

    # --- the loop -----------------------------------------------------------------------
    def _run(self) -> None:
        backoff_s = self.config.reconnect_min_ms / 1000
        while not self._stopping.is_set():
            try:
                self._follow()
            except (OSError, StoreError) as exc:
                if self._stopping.is_set():
                    break
                self._report(f"replication from {self.master_address}: {type(exc).__name__}: {exc}")
            finally:
                self.connected = False
                if self._sock is not None:
                    close_quietly(self._sock)
                    self._sock = None
            if self._stopping.wait(backoff_s):
                break
            backoff_s = min(backoff_s * 2, self.config.reconnect_max_ms / 1000)

    def _follow(self) -> None:
        host, port = parse_address(self.master_address)
        sock = socket.create_connection((host, port), timeout=self.config.connect_timeout_ms / 1000)
        self._sock = sock
        tune(sock, POLL_S)
        if self.config.tls is not None:  # mutual TLS: the master's certificate names its host
            sock.settimeout(self.config.tls.handshake_timeout_s)
            sock = self._tls_context().wrap_socket(sock, server_hostname=host)
            sock.settimeout(POLL_S)
            self._sock = sock
        if self._stopping.is_set():
            raise ConnectionClosed("stopping")
        send_all(sock, [encode_slave_handshake(self._handshake())])
        handshake = self._read_handshake(sock)
        if handshake.epoch < self.master_epoch:
            raise StaleMaster(
                f"{self.master_address} answered with epoch {handshake.epoch}, below the master epoch "
                f"{self.master_epoch} this replica follows: a deposed master"
            )
        self.log.dispatch_appended()  # what a dropped connection left undispatched
        first_ack = self._truncate_to_consistent_point(handshake)
        self.connected = True
        self._ack(sock, force=True, offset=first_ack)
        header_buf = bytearray(TRANSFER_HEADER.size)
        body_buf = bytearray(self.config.transfer_batch_bytes)
        while not self._stopping.is_set():
            self._recv(sock, memoryview(header_buf))
            header = decode_transfer_header(header_buf)
            if header.body_size > len(body_buf):
                body_buf = bytearray(header.body_size)
            body = memoryview(body_buf)[: header.body_size]
            self._recv(sock, body)
            self._apply(header, body)
            if self._ack_due(sock):
                self._ack(sock)
            backlog = self.log.max_offset - self.log.dispatched_to
            if not backlog:
                self.log.advance_confirm(min(self._master_confirm, self.log.max_offset))
            elif backlog >= DISPATCH_EVERY_BYTES or not more_waiting(sock, DISPATCH_IDLE_S):
                self._dispatch()

    def _tls_context(self) -> ssl.SSLContext:
        if self._context is None:
            assert self.config.tls is not None
            self._context = self.config.tls.client_context()
        return self._context

    def _handshake(self) -> SlaveHandshake:
        return SlaveHandshake(
            self.config.broker_id, self.config.sync_from_last_file, self.config.async_learner
        )

    def _read_handshake(self, sock: socket.socket) -> MasterHandshake:
        head = bytearray(MASTER_HANDSHAKE.size)
        self._recv(sock, memoryview(head), heartbeat=False)
        body_size, max_offset, epoch = decode_master_handshake_header(head)
        body = bytearray(body_size)
        self._recv(sock, memoryview(body), heartbeat=False)
        return MasterHandshake(max_offset, epoch, decode_epoch_entries(body))

    def _truncate_to_consistent_point(self, master: MasterHandshake) -> int:
        """Cut the local log where it stops sharing the master's history; returns the offset
        the first ack reports (0: a new replica, the master starts at its first file)."""
        local = self._epochs.entries
        if not local:
            if self.log.max_offset > self.log.min_offset:
                raise NoConsistentPoint(
                    f"the local log holds data [{self.log.min_offset}, {self.log.max_offset}) but no "
                    "epoch history: it cannot be matched with the master's (wipe it to rebuild)"
                )
            return 0  # a new replica
        point = find_consistent_point(local, self.log.max_offset, master.entries, master.max_offset)
        if point is None:
            return self._rebuild(local, master)
        if point < self.log.max_offset:
            point = min(point, self.log.dispatched_to)
            self._truncate(point, f"consistent point with the master at {self.master_address}")
        elif any(e.start_offset >= point for e in local):
            self._epochs.truncate_suffix_by_offset(point)
        return self.log.max_offset

    def _rebuild(self, local: tuple[EpochEntry, ...], master: MasterHandshake) -> int:
        """No epoch in common: everything local is a history the master never had (an unclean
        election). A log that still starts at offset 0 is cut whole and replicated anew; one
        that retention trimmed cannot be (its ConsumeQueues start mid-way): wipe it by hand."""
        if self.log.min_offset != 0:
            raise NoConsistentPoint(
                f"no epoch in common: local {list(local)}, master {list(master.entries)}; the local "
                f"log starts at {self.log.min_offset}, so it must be wiped by hand to be rebuilt"
            )
        self._report(
            f"no epoch in common with {self.master_address} (local {list(local)}, master "
            f"{list(master.entries)}): dropping the local log, replicating from scratch"
        )
        self._truncate(0, "no epoch in common with the master: rebuilt from scratch")
        self._epochs.clear()
        return 0

    # --- frames ---------------------------------------------------------------------------
    def _apply(self, header: TransferHeader, body: memoryview) -> None:
        local_end = self.log.max_offset
        empty = local_end == self.log.min_offset  # a new replica takes the master's first offset
        if header.offset != local_end and not empty:
            raise HAProtocolError(
                f"the master sent offset {header.offset}, the local log ends at {local_end}"
            )
        self._check_epoch(header)
        if header.body_size:
            self.log.append_raw(header.offset, body)
            if not self._unacked_bytes:
                self._first_unacked_s = time.monotonic()
            self._unacked_bytes += header.body_size
        self._master_confirm = max(self._master_confirm, header.confirm_offset)

    def _check_epoch(self, header: TransferHeader) -> None:
        last = self._epochs.last_entry
        if last is not None and header.epoch < last.epoch:
            self._rejected()
            raise StaleEpochFrame(
                f"a frame of epoch {header.epoch} at offset {header.offset}, but this replica has "
                f"seen epoch {last.epoch}: rejected"
            )
        if last is not None and header.epoch == last.epoch:
            return
        if header.epoch_start_offset > header.offset:
            raise HAProtocolError(
                f"epoch {header.epoch} starts at {header.epoch_start_offset}, "
                f"after the frame at {header.offset}"
            )
        self._epochs.append(EpochEntry(header.epoch, header.epoch_start_offset))

    def _dispatch(self) -> None:
        self.log.dispatch_appended()
        self.log.advance_confirm(min(self._master_confirm, self.log.max_offset))

    def _ack_due(self, sock: socket.socket) -> bool:
        """The stream paused, or enough bytes or time went by since the first unacked frame."""
        if self._unacked_bytes and time.monotonic() - self._first_unacked_s >= ACK_MAX_DELAY_S:
            return True
        return self._unacked_bytes >= ACK_EVERY_BYTES or self._heartbeat_due() or not more_waiting(sock)

    def _heartbeat_due(self) -> bool:
        return time.monotonic() - self._last_ack_s >= self.config.heartbeat_interval_ms / 1000

    def _ack(self, sock: socket.socket, *, force: bool = False, offset: int | None = None) -> None:
        """Report the local end (after an fsync under SYNC_FLUSH) when it moved, at least every
        heartbeat interval even while frames keep coming (the master's housekeeping)."""
        end = self.log.max_offset if offset is None else offset
        if not force and end == self._reported and not self._heartbeat_due():
            return
        if self.log.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.log.flush()
        send_all(sock, [encode_slave_ack(end)])
        self._reported, self._last_ack_s, self._unacked_bytes = end, time.monotonic(), 0

    def _recv(self, sock: socket.socket, view: memoryview, *, heartbeat: bool = True) -> None:
        """Fill ``view``; while waiting, send due heartbeat acks and watch the housekeeping
        interval (nothing read for that long: the master is gone)."""
        idle_s = self.config.housekeeping_interval_ms / 1000
        filled, last_data = 0, time.monotonic()
        while filled < len(view):
            if self._stopping.is_set():
                raise ConnectionClosed("stopping")
            try:
                got = sock.recv_into(view[filled:])
            except TimeoutError:
                if time.monotonic() - last_data > idle_s:
                    raise ConnectionClosed(f"nothing from the master for {idle_s:.1f} s") from None
                if heartbeat:
                    self._ack(sock)
                continue
            if got == 0:
                raise ConnectionClosed("the master closed the connection")
            filled += got
            last_data = time.monotonic()
